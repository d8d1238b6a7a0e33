"""``kafkawire-sniff apis``: the Kafka API keys and versions the schema decodes."""
from __future__ import annotations

import json

import click

from analyzer.errors import stdout_console


@click.command("apis")
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def apis_command(fmt: str) -> int:
    """List the Kafka API keys and versions we decode."""
    from dissectors.kafka import list_apis

    rows = list_apis()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return 0
    from rich.table import Table

    table = Table(title=f"{len(rows)} Kafka API keys")
    for col in ("api_key", "name", "versions", "flexible from"):
        table.add_column(col)
    for r in rows:
        flex = r.get("flexible_from")
        table.add_row(str(r["api_key"]), r["name"], f"{r['min_version']}-{r['max_version']}",
                      "-" if flex is None else f"v{flex}")
    stdout_console().print(table)
    return 0
