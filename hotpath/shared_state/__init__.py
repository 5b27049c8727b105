"""State every gateway / API replica shares, in Redis: where it is (`target`), a local redis-server for
`serve` and the tests (`server`), and the exact cache's keys (`cache_key`)."""
