"""Writing an assignment: scaffolding, nbgrader metadata."""
