"""One settings object for the service, the CLI and the indexer.

Environment variables use the prefix ``FLYSIFT_`` (``FLYSIFT_DATA_DIR``, ``FLYSIFT_CLUSTER_URL``…); a TOML file named
by ``FLYSIFT_CONFIG`` may set the same keys (the environment wins). Every default works on one machine with the
embedded engine. Credentials are ``SecretStr``, so they never show in a repr, a log line or a failing test's output.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from search.core.base import Model
from search.core.errors import FlysiftError
from search.core.names import PATTERNS
from search.core.query import BM25_B, BM25_K1, FIELD_BOOSTS, MAX_FIELD_REPEAT, Bm25Params

CONFIG_ENV = "FLYSIFT_CONFIG"
ENV_PREFIX = "FLYSIFT_"
#: characters of a refused value an error quotes
MAX_QUOTED = 60
#: the default request limits (settings ``max_page_size`` and ``max_query_chars``), for papers, passages and terms
MAX_PAGE_SIZE = 100
MAX_QUERY_CHARS = 1000


def _config_error(message: str) -> FlysiftError:
    return FlysiftError(message, code="config_error", status=500)


def _toml_values(path: Path, valid: list[str]) -> dict[str, Any]:
    """The ``FLYSIFT_CONFIG`` file's settings, strict: the file must exist and every key must be a setting.

    The environment ignores unknown ``FLYSIFT_*`` variables (CI and tests set their own), but a key in the file is
    meant for us, so a misspelt one is refused instead of being silently ignored.
    """
    if not path.is_file():
        raise _config_error(f"{CONFIG_ENV}={path}: no such file")
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise _config_error(f"{CONFIG_ENV}={path}: cannot be read ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise _config_error(f"{CONFIG_ENV}={path}: not valid TOML ({exc})") from exc
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise _config_error(f"{CONFIG_ENV}={path}: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    return data


def _env_values(fields: dict[str, Any]) -> dict[str, Any]:
    """``FLYSIFT_<NAME>`` variables (any case) of the settings in ``fields``; a table's value (``collections``) is
    JSON."""
    env = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
    out: dict[str, Any] = {}
    for name, field in fields.items():
        value = env.get(ENV_PREFIX + name.upper())
        if value is None:
            continue
        if _is_table(field.annotation):
            try:
                out[name] = json.loads(value)
            except ValueError as exc:
                quoted = repr(value[:MAX_QUOTED]) + ("…" if len(value) > MAX_QUOTED else "")
                raise _config_error(f"invalid setting {ENV_PREFIX}{name.upper()}={quoted}: not valid JSON "
                                    f"({exc})") from None
        else:
            out[name] = value
    return out


def _is_table(annotation: Any) -> bool:
    """Whether a setting's type is a dict, list or model (given as JSON in the environment)."""
    kinds = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return any(get_origin(a) in (dict, list) or (isinstance(a, type) and issubclass(a, BaseModel)) for a in kinds)


def _merged(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``; tables (``collections``) merge key by key, so the file and the environment can each
    set part of one."""
    out = dict(low)
    for k, v in high.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class FieldWeights(Model):
    """A collection's paper field weights; a field left out keeps its default (``FIELD_BOOSTS``). Each is how many
    times the field is written into the paper's one searched field at index time, so a whole number, 1 to
    ``MAX_FIELD_REPEAT`` (a change applies from the next build)."""

    model_config = ConfigDict(extra="forbid")

    title: int | None = Field(None, ge=1, le=MAX_FIELD_REPEAT, strict=True)
    abstract: int | None = Field(None, ge=1, le=MAX_FIELD_REPEAT, strict=True)
    body: int | None = Field(None, ge=1, le=MAX_FIELD_REPEAT, strict=True)


class CollectionSettings(Model):
    """``[collections.<name>]`` of the config file: the collection's BM25 parameters (docs/search.md, "Scoring").
    ``bm25_k1``/``bm25_b`` need an engine that can set them (the cluster engine; ``search.engines.check_settings``
    refuses them at startup otherwise); field weights work in both engines; all three apply from the collection's
    next build."""

    model_config = ConfigDict(extra="forbid")

    field_weights: FieldWeights | None = None
    bm25_k1: float | None = Field(None, ge=0, le=10, allow_inf_nan=False, strict=True)
    bm25_b: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, strict=True)


#: the config models whose keys are checked, by where they sit under ``collections`` (for the valid names in errors)
_NESTED: dict[int, type[BaseModel]] = {3: CollectionSettings, 4: FieldWeights}


class Settings(Model):
    """Every setting, from arguments, then ``FLYSIFT_<NAME>`` variables, then the ``FLYSIFT_CONFIG`` file.

    Sources are read here rather than by pydantic-settings, whose import (asyncio, importlib.metadata, its cloud and
    CLI sources) cost a ``flysift terms`` call more than its search (docs/ontologies.md, "Speed")."""

    model_config = ConfigDict(extra="ignore", validate_default=True)

    def __init__(self, **values: Any) -> None:
        fields = type(self).model_fields
        path = os.environ.get(CONFIG_ENV)
        file = _toml_values(Path(path), sorted(fields)) if path else {}
        super().__init__(**_merged(_merged(file, _env_values(fields)), values))

    data_dir: Path = Field(Path("./data"), description="Where the embedded index, builds and the session store live")

    # engine choice: embedded unless a cluster URL is set
    engine: Literal["embedded", "cluster"] | None = None
    cluster_url: str | None = Field(None, description="Comma-separated Elasticsearch/OpenSearch URLs")
    cluster_flavour: Literal["elasticsearch", "opensearch"] = "opensearch"
    cluster_api_key: SecretStr | None = None
    cluster_username: str | None = None
    cluster_password: SecretStr | None = None
    cluster_ca_file: Path | None = None
    cluster_verify_certs: bool = True
    cluster_timeout_s: float = 30.0
    cluster_index_prefix: str = "flysift"
    cluster_shards: int = Field(1, ge=1, le=1024, description="Primary shards of each papers, passages, vectors "
                                "and terms index; one keeps BM25 statistics identical to the embedded engine's and is "
                                "right up to ~30 GB of index (docs/scaling.md)")
    cluster_replicas: int | None = Field(None, ge=0, le=16, description="Replica copies of each index (the session "
                                         "store's included); default: 1 where the cluster has two or more data nodes "
                                         "(one node may be lost), else 0")
    cluster_keep_versions: int = 2
    cluster_snapshot_location: str | None = Field(
        None, max_length=4096, description="Folder of the shared-filesystem snapshot repository that `flysift backup` "
        "uses in cluster mode (registered once as <prefix>-backups); it must lie under every node's path.repo, a "
        "relative one is taken under it; default: the index prefix")
    cluster_bulk_concurrency: int | None = Field(None, ge=1, le=32, description="_bulk requests in flight while "
                                                 "indexing; default 2 per data node, at least 2")

    # request limits: of paper, passage and term searches alike
    max_query_chars: int = Field(MAX_QUERY_CHARS, ge=1, description="Longest query (characters) of a paper, "
                                 "passage or term search")
    max_page_size: int = Field(MAX_PAGE_SIZE, ge=1, description="Most hits one search answers (papers, passages, "
                               "terms, the FlyAOC term tools)")
    max_offset: int = 10_000
    max_export_hits: int = Field(100_000, ge=1, le=10_000_000, description="Most hits one export (format=csv, "
                                 "tsv, ris, bibtex, jsonl, trec) streams")
    default_paper_max_chars: int = 40_000
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest JSON body of a collection build's "
                                "papers (bytes); builds send papers in batches under it")
    max_query_body_bytes: int = Field(1024 * 1024, ge=1024, description="Largest JSON body of every other route "
                                      "(searches, sessions, names; a submission may take up to 2 MiB, texts to "
                                      "recognise 4 MiB)")

    # indexing
    min_publish_share: float = Field(0.5, ge=0.0, le=1.0, description="Refuse to publish a build holding less than "
                                     "this share of the live build's papers (--allow-shrink / allow_shrink overrides)")
    build_idle_timeout_s: float = Field(900.0, ge=0.0, description="An API build unused this long is aborted and "
                                        "its collection unlocked")
    index_workers: int | None = Field(None, ge=1, le=64, description="Processes that parse and prepare records "
                                      "for the one writer (1: none, all in the indexing process); default: the "
                                      "usable cores, at most 8, and 1 for inputs under 4 MiB")
    index_threads: int | None = Field(None, ge=1, le=64, description="Indexing threads of each of the embedded "
                                      "engine's two writers; default: a third of the cores (at least 1, at most 8)")

    # service
    host: str = "127.0.0.1"
    port: int = 8000
    auth: bool = Field(False, description="Require API keys; off only for local demos")
    rate_limit_per_minute: float = Field(600.0, description="Requests per minute per key and process; 0 = off")
    rate_limit_burst: int = Field(60, description="Requests a key may make at once before the rate applies")
    log_format: Literal["json", "text"] = Field("json", description="The service log: one JSON object per line, or "
                                                "plain text")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = Field(False, description="One line per request (request id, route, status, duration, engine "
                                                "time, team, session; never a key, cookie, query string or body)")
    access_log_file: Path | None = Field(None, description="Write the access log here (JSON lines) instead of "
                                                           "stderr")
    otel: bool = Field(False, description="FastAPI's own OpenTelemetry spans, metrics and logs through the global "
                                          "providers (opentelemetry-instrument or your SDK setup); off: no "
                                          "per-request provider checks")

    # sessions
    session_store: Literal["sqlite", "cluster"] | None = Field(
        None, description="sqlite (default) or cluster (the Elasticsearch/OpenSearch of FLYSIFT_CLUSTER_URL)")
    session_db: Path | None = Field(None, description="SQLite file (default <data_dir>/sessions.sqlite)")
    lexicon: str | None = Field(None, description="Comma-separated gene lexicon sources (see search.text.lexicon)")
    ground_truth: Path | None = Field(None, description="FlyAOC ground truth, for coverage of curator-cited papers")
    runs_dir: Path | None = Field(None, description="Directory of curation run directories (`flysift curate batch "
                                  "--run-dir`) that the run review pages (/runs) list by name")
    cursor_secret: SecretStr | None = Field(
        None, description="Key that signs paper-text cursors (16+ characters); default: generated once into "
                          "<data_dir>/cursor_secret. Set it when API processes on several machines share sessions")

    # scoring, per collection (TOML tables [collections.<name>], or FLYSIFT_COLLECTIONS as JSON)
    collections: dict[str, CollectionSettings] = Field(
        default_factory=dict, description="Per-collection BM25 parameters: field_weights = {title, abstract, "
                                          "body} (whole repetition counts 1-5, written at index time), bm25_k1 "
                                          "(0-10), bm25_b (0-1; both need the cluster engine)")

    @field_validator("collections")
    @classmethod
    def _collection_names(cls, value: dict[str, CollectionSettings]) -> dict[str, CollectionSettings]:
        bad = [name for name in value if not PATTERNS["collection"].fullmatch(name)]
        if bad:
            raise ValueError(f"collection name {bad[0][:MAX_QUOTED]!r} is not [a-z0-9][a-z0-9_-]{{0,62}}")
        return value

    def bm25(self, collection: str) -> Bm25Params:
        """The BM25 parameters configured for ``collection``: its table's keys, defaults for the rest."""
        c = self.collections.get(collection)
        if c is None:
            return Bm25Params()
        given = c.field_weights.model_dump(exclude_none=True) if c.field_weights else {}
        return Bm25Params(k1=BM25_K1 if c.bm25_k1 is None else c.bm25_k1, b=BM25_B if c.bm25_b is None else c.bm25_b,
                          field_weights={f: float(given.get(f, w)) for f, w in FIELD_BOOSTS.items()})

    @property
    def engine_kind(self) -> str:
        """embedded or cluster: read by the engine factory (``search.engines``) alone; code above the engines asks
        an engine's capabilities."""
        if self.engine:
            return self.engine
        return "cluster" if self.cluster_url else "embedded"


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "text", Path: "a path"}


def _accepts(name: str) -> str:
    """What setting ``name`` accepts, in words (its type, bounds and choices)."""
    field = Settings.model_fields.get(name)
    if field is None:
        return "a valid value"
    ann = field.annotation
    args = [a for a in get_args(ann) if a is not type(None)] or [ann]
    choices = [v for a in args if get_origin(a) is Literal for v in get_args(a)]
    if choices:
        kind = "one of " + ", ".join(str(c) for c in choices)
    else:
        kind = next((_KINDS[a] for a in args if a in _KINDS), "a secret" if SecretStr in args else "a valid value")
    bounds = [f"{label} {getattr(m, attr)}" for m in field.metadata
              for attr, label in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if hasattr(m, attr)]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def describe_error(exc: ValidationError) -> str:
    """One line for a settings validation error: each refused setting by its variable name (or its key in the
    ``FLYSIFT_CONFIG`` file), the value (cut short; never a credential's) and what it accepts."""
    parts = []
    for err in exc.errors():
        if not err["loc"]:   # a rule across settings: its message says it all
            parts.append(err["msg"].removeprefix("Value error, "))
            continue
        if len(err["loc"]) > 1:
            parts.append(_nested_error(err))
            continue
        name = str(err["loc"][0])
        env = f"FLYSIFT_{name.upper()}"
        in_file = env not in os.environ and os.environ.get(CONFIG_ENV)
        field = Settings.model_fields.get(name)
        secret = field is not None and SecretStr in (get_args(field.annotation) or (field.annotation,))
        value = "<hidden>" if secret else repr(str(err.get("input", "")))
        if len(value) > MAX_QUOTED:
            value = value[:MAX_QUOTED] + "…"
        where = f"{name}={value} (in {in_file})" if in_file else f"{env}={value}"
        reason = (err["msg"].removeprefix("Value error, ") if err["type"] == "value_error"
                  else f"expected {_accepts(name)}")
        parts.append(f"{where}: {reason}")
    return "invalid setting " + "; ".join(parts)


def _nested_error(err: Any) -> str:
    """A key inside a table (``collections.med.bm25_k1``), named by its path: an unknown key with the valid names,
    a refused value with pydantic's reason."""
    loc = [str(x) for x in err["loc"]]
    path = ".".join(x[:MAX_QUOTED] for x in loc)
    in_file = f"FLYSIFT_{loc[0].upper()}" not in os.environ and os.environ.get(CONFIG_ENV)
    where = f" (in {in_file})" if in_file else ""
    model = _NESTED.get(len(loc)) if loc[0] == "collections" else None
    if err["type"] == "extra_forbidden" and model is not None:
        return f"unknown key {path}{where}; valid: {', '.join(sorted(model.model_fields))}"
    value = repr(err.get("input", ""))
    if len(value) > MAX_QUOTED:
        value = value[:MAX_QUOTED] + "…"
    return f"{path}={value}{where}: {err['msg'].removeprefix('Value error, ')}"


def load_settings(**overrides: Any) -> Settings:
    """:class:`Settings` from arguments, the environment and the ``FLYSIFT_CONFIG`` file; a value they refuse is a
    one-line ``config_error`` (no pydantic traceback)."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise _config_error(describe_error(exc)) from exc
