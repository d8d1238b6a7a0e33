"""Where exchanges go: `stats` (the latency and insights accumulator, rendered by
`stats_render`), `check` (client and broker diagnostics), `insights` (consumer lag,
producer and group stories), `output` (summary lines, trees, JSON) and `fastjson`."""
