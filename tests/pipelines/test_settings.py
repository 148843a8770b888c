import pytest

from pipelines import settings as S
from pipelines.session import MissingJarsError, delta_jars


def test_committed_default_loads():
    s = S.load(S.DEFAULT_CONF, env={})
    assert s.lake.root == "lake" and s.spark.master == "local[2]"
    assert s.source("demo-nsq").format == "nsq-ext" and s.source("demo-nsq").storeHost == "127.0.0.1:4150"
    assert s.source("demo-rocketmq").format == "rocketmq-commitlog"
    with pytest.raises(S.SettingsError, match="give a source name, one of"):
        s.source()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"lake": {"rooot": "x"}}, "lake.rooot: unknown key"),
        ({"lake": {"root": 5}}, "lake.root: Input should be a valid string (got 5)"),
        ({"spark": {"conf": {"a": [1]}}}, "spark.conf.a"),
        ({"ingest": {"maxBytesPerTrigger": -1}}, "ingest.maxBytesPerTrigger: Input should be greater than 0"),
        ({"ingest": {"splitBytes": "16"}}, "ingest.splitBytes: Input should be a valid integer"),
        ({"sources": [{"name": "a", "format": "kafka", "path": "p"}]}, "sources.0.format"),
        ({"sources": [{"name": "a", "format": "nsq-ext", "path": "p", "storeHost": "nohost"}]}, "sources.0.storeHost"),
        ({"sources": [{"name": "a b", "format": "nsq-ext", "path": "p"}]}, "sources.0.name"),
        ({"sources": [{"name": "a", "format": "nsq-ext"}]}, "sources.0.path: Field required"),
        ({"extra": {}}, "extra: unknown key"),
    ],
)
def test_bad_settings_name_the_key(doc, message):
    with pytest.raises(S.SettingsError) as e:
        S.from_dict(doc, "conf.yaml")
    assert message in str(e.value) and str(e.value).startswith("conf.yaml")


def test_yaml_problems(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lake: [unclosed")
    with pytest.raises(S.SettingsError, match="not valid YAML"):
        S.load(bad, env={})
    bad.write_text("- a list")
    with pytest.raises(S.SettingsError, match="top level must be a mapping"):
        S.load(bad, env={})
    with pytest.raises(S.SettingsError, match="not found"):
        S.load(tmp_path / "absent.yaml", env={})
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert S.load(empty, env={}).sources == []


def test_environment_overrides(tmp_path):
    s = S.load(S.DEFAULT_CONF, env={"MSGLAKE_LAKE_ROOT": str(tmp_path), "MSGLAKE_SPARK_MASTER": "local[1]"})
    assert s.lake.root == str(tmp_path) and s.spark.master == "local[1]"
    conf = tmp_path / "c.yaml"
    conf.write_text("lake: {root: elsewhere}\n")
    assert S.load(env={"MSGLAKE_CONF": str(conf)}).lake.root == "elsewhere"


def test_source_lookup():
    s = S.from_dict({"sources": [{"name": "a", "format": "nsq-ext", "path": "p"},
                                 {"name": "b", "format": "nsq-ext", "path": "q"}]})
    assert s.source("b").path == "q"
    with pytest.raises(S.SettingsError, match="give a source name"):
        s.source()
    with pytest.raises(S.SettingsError, match="no source named 'c'"):
        s.source("c")


def test_missing_jars_say_how_to_fetch_them(tmp_path):
    s = S.from_dict({"spark": {"jarsDir": str(tmp_path)}})
    with pytest.raises(MissingJarsError, match="make setup"):
        delta_jars(s)


def test_jars_are_there_after_setup():
    jars = delta_jars(S.load(S.DEFAULT_CONF, env={}))
    assert any("delta-spark_4.2_2.13" in j for j in jars) and any("delta-storage" in j for j in jars)
