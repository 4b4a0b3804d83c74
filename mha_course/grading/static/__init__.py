"""Reading a submission without running it: the static scan and the similarity check."""
