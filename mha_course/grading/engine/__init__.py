"""One submission from notebook to verdicts: spec, registry, process, cases, scoring."""
