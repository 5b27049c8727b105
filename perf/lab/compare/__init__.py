"""An endpoint beside what a user would run instead, same machine, same load, one run."""
