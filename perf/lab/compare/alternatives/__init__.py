"""What a user would run instead of hotpath, measured under the same load in the same run."""
