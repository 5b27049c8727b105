"""The lab: hotpath beside rival servers (compare/), one-off studies (studies/) and experiments."""
