"""One settings object for the service, the CLI and the indexer.

Environment variables use the prefix ``FLYSIFT_`` (``FLYSIFT_DATA_DIR``, ``FLYSIFT_CLUSTER_URL``…); a TOML file named
by ``FLYSIFT_CONFIG`` may set the same keys. Every default works on one machine with the embedded engine.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


def _toml_source() -> dict[str, Any]:
    path = os.environ.get("FLYSIFT_CONFIG")
    if not path:
        return {}
    with open(path, "rb") as fh:
        return tomllib.load(fh)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLYSIFT_", extra="ignore")

    data_dir: Path = Field(Path("./data"), description="Where the embedded index, builds and the session store live")

    # engine choice: embedded unless a cluster URL is set
    engine: Literal["embedded", "cluster"] | None = None
    cluster_url: str | None = Field(None, description="Comma-separated Elasticsearch/OpenSearch URLs")
    cluster_flavour: Literal["elasticsearch", "opensearch"] = "opensearch"
    cluster_api_key: str | None = None
    cluster_username: str | None = None
    cluster_password: str | None = None
    cluster_ca_file: Path | None = None
    cluster_verify_certs: bool = True
    cluster_timeout_s: float = 30.0
    cluster_index_prefix: str = "flysift"
    cluster_shards: int = 1
    cluster_replicas: int = 0
    cluster_keep_versions: int = 2

    # request limits
    max_query_chars: int = 1000
    max_page_size: int = 100
    max_offset: int = 10_000
    default_paper_max_chars: int = 40_000
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest JSON request body (bytes); "
                                "collection builds send papers in batches under it")

    # indexing
    min_publish_share: float = Field(0.5, ge=0.0, le=1.0, description="Refuse to publish a build holding less than "
                                     "this share of the live build's papers (--allow-shrink / allow_shrink overrides)")
    build_idle_timeout_s: float = Field(900.0, ge=0.0, description="An API build unused this long is aborted and "
                                        "its collection unlocked")

    # service
    host: str = "127.0.0.1"
    port: int = 8000
    auth: bool = Field(False, description="Require API keys; off only for local demos")
    rate_limit_per_minute: float = Field(600.0, description="Requests per minute per key and process; 0 = off")
    rate_limit_burst: int = Field(60, description="Requests a key may make at once before the rate applies")

    # sessions
    session_store: Literal["sqlite", "cluster"] | None = Field(
        None, description="sqlite (default) or cluster (the Elasticsearch/OpenSearch of FLYSIFT_CLUSTER_URL)")
    session_db: Path | None = Field(None, description="SQLite file (default <data_dir>/sessions.sqlite)")
    lexicon: str | None = Field(None, description="Comma-separated gene lexicon sources (see search.text.lexicon)")
    ground_truth: Path | None = Field(None, description="FlyAOC ground truth, for coverage of curator-cited papers")
    cursor_secret: SecretStr | None = Field(
        None, description="Key that signs paper-text cursors (16+ characters); default: generated once into "
                          "<data_dir>/cursor_secret. Set it when API processes on several machines share sessions")

    @property
    def engine_kind(self) -> str:
        if self.engine:
            return self.engine
        return "cluster" if self.cluster_url else "embedded"

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource):
        class Toml(PydanticBaseSettingsSource):
            def get_field_value(self, field, field_name):  # pragma: no cover - not used by __call__
                return None, field_name, False

            def __call__(self) -> dict[str, Any]:
                return _toml_source()

        return init_settings, env_settings, Toml(settings_cls), file_secret_settings
