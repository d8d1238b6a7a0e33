"""Where exchanges go: `stats` (the stories `stats` follows in order beside its queries;
`stats_render` renders its report), `check` (client and broker diagnostics), `insights`
(group stories, committed-offset lag, requests in flight), `metrics` (`live --metrics`),
`output` (summary lines, trees, JSON) and `fastjson`."""
