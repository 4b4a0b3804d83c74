"""A class of submissions: collect, roster, seeds, policy, results, reports, feedback."""
