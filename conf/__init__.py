"""msglake's embedded configuration, shipped inside the package (``msglake.conf``).

- ``base/msglake.yaml``: the default settings, the embedded default ``make demo`` runs on;
  a user's file overlays it key by key (:func:`msglake.pipelines.settings.load`).
- ``log4j2.properties``: Spark's JVM logging for msglake runs.
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SETTINGS = HERE / "base" / "msglake.yaml"
LOG4J = HERE / "log4j2.properties"
