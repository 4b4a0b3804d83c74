"""The operating system's walls around a submission: the tiers (bubblewrap, landlock, uid) and their registry, the view, resources."""
