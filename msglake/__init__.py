"""msglake: message-broker segment files (NSQ, RocketMQ) into Delta Lake tables.

The public API, short on purpose::

    import msglake

    settings = msglake.load_settings()            # conf/base + conf/local + $MSGLAKE_CONF, validated
    spark = msglake.build_session(settings)       # Delta, the msglake source, the lake's tables and views
    spark.table("messages").groupBy("topic").count().show()

The packages keep their folders: ``msglake.schemas`` (table definitions), ``msglake.formats``
(segment decoders), ``msglake.samples`` (sample-data writers), ``msglake.transforms`` (pure
DataFrame transforms), ``msglake.quality`` (row checks, suites, reports) and
``msglake.pipelines`` (settings, session, Spark source and sinks, jobs, the CLI).

Names are resolved on first use: ``import msglake`` alone imports neither pyspark nor pyarrow
(the command-line client of the query server stays quick to start).
"""
from __future__ import annotations

import importlib

from msglake.errors import MsglakeError

__version__ = "0.2.0"

#: Public name -> "module:attribute", imported on first access.
_LAZY = {
    "build_session": "msglake.pipelines.session:build_session",
    "load_settings": "msglake.pipelines.settings:load",
    "Settings": "msglake.pipelines.settings:Settings",
    #: The lake's table names, in creation order (also their folders and catalog names).
    "TABLES": "msglake.schemas:TABLE_NAMES",
}

__all__ = ["MsglakeError", *_LAZY]


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name].split(":")
    except KeyError:
        raise AttributeError(f"module 'msglake' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
