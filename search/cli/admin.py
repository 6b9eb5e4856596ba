"""``flysift admin …``: teams and API keys, written straight into the session store the API reads.

Keys are printed once, at creation; the store keeps only their hash.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click

from search.cli.options import data_dir_option, settings_for
from search.services import Services
from search.sessions.keys import SCOPES, check_team_name, new_key
from search.sessions.store import SessionStore


def _store(data_dir: Path | None) -> SessionStore:
    return Services.open(settings_for(data_dir)).store


def _when(t: float | None) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if t else ""


@click.group()
def admin() -> None:
    """Teams and API keys (used when the API runs with FLYSIFT_AUTH=true)."""


@admin.command("create-team")
@data_dir_option
@click.argument("name")
def create_team(data_dir: Path | None, name: str) -> None:
    """Create a team; its sessions are visible only to its keys."""
    _store(data_dir).create_team(check_team_name(name))
    click.echo(f"team {name} created")


@admin.command("create-key")
@data_dir_option
@click.option("--team", required=True, help="The team the key acts for")
@click.option("--scope", "scopes", multiple=True, type=click.Choice(SCOPES), default=("agent",), show_default=True,
              help="Repeat for several; admin also allows indexing endpoints")
@click.option("--name", default="", help="A label, e.g. the harness or person using the key")
def create_key(data_dir: Path | None, team: str, scopes: tuple[str, ...], name: str) -> None:
    """Create an API key and print it (only this once)."""
    key, record = new_key(team, list(scopes), name)
    _store(data_dir).add_key(record)
    click.echo(key)
    click.echo(f"key id {record.id}, team {team}, scopes {','.join(record.scopes)}: store it now, it is not "
               "shown again", err=True)


@admin.command("list-keys")
@data_dir_option
@click.option("--team", default=None, help="Only this team's keys")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table")
def list_keys(data_dir: Path | None, team: str | None, as_json: bool) -> None:
    """List keys (ids, teams, scopes, state; never the keys themselves)."""
    for k in _store(data_dir).list_keys(team):
        if as_json:
            click.echo(json.dumps(k.model_dump()))
        else:
            state = f"revoked {_when(k.revoked_at)}" if k.revoked_at else "active"
            click.echo(f"{k.id}\t{k.team}\t{','.join(k.scopes)}\t{k.name}\tcreated {_when(k.created_at)}\t{state}")


@admin.command("revoke-key")
@data_dir_option
@click.argument("key_id")
def revoke_key(data_dir: Path | None, key_id: str) -> None:
    """Revoke a key by id; requests with it are refused from then on."""
    k = _store(data_dir).revoke_key(key_id)
    click.echo(f"key {k.id} of team {k.team} revoked")
