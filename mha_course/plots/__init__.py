"""The course's pictures: heatmaps, vector plots, interactive widgets."""
