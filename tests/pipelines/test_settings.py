import pytest

from msglake.errors import ConfigError, SetupError
from msglake.pipelines import settings as S
from msglake.pipelines.session import delta_jars


def test_committed_default_loads():
    s = S.from_dict(S.default_document())
    assert s.lake.root == "lake" and s.spark.master == "local[2]"
    assert s.source("demo-nsq").format == "nsq-ext" and s.source("demo-nsq").storeHost == "127.0.0.1:4150"
    assert s.source("demo-rocketmq").format == "rocketmq-commitlog"
    with pytest.raises(ConfigError, match="give a source name, one of"):
        s.source()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"lake": {"rooot": "x"}}, "lake.rooot: unknown key"),
        ({"lake": {"root": 5}}, "lake.root: Input should be a valid string (got 5)"),
        ({"lake": {"root": "/data/my`lake"}}, "lake.root: a backtick (`) in the lake's folder is not supported"),
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
    with pytest.raises(ConfigError) as e:
        S.from_dict(doc, "conf.yaml")
    assert message in str(e.value) and str(e.value).startswith("conf.yaml")


def test_yaml_problems(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lake: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        S.load(bad, env={})
    bad.write_text("- a list")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        S.load(bad, env={})
    with pytest.raises(ConfigError, match="not found"):
        S.load(tmp_path / "absent.yaml", env={})
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert S.load(empty, env={}) == S.from_dict(S.default_document())


def test_a_users_file_overlays_the_default_key_by_key(tmp_path):
    conf = tmp_path / "my.yaml"
    conf.write_text("lake: {root: /data/lake}\n"
                    "spark: {conf: {spark.driver.memory: 4g}}\n"
                    "sources: [{name: prod, format: nsq-ext, path: /data/nsqd}]\n"
                    "quality: {rules: {topic_name: warn}}\n"
                    "policies: {payments: {maxDeliveries: 3}}\n")
    base, s = S.from_dict(S.default_document()), S.load(conf, env={})
    assert s.lake.root == "/data/lake" and [x.name for x in s.sources] == ["prod"]  # a list replaces
    assert s.spark.conf["spark.driver.memory"] == "4g"
    assert {k: v for k, v in s.spark.conf.items() if k != "spark.driver.memory"} == {
        k: v for k, v in base.spark.conf.items() if k != "spark.driver.memory"}  # the rest kept
    assert s.quality.rules.topic_name == "warn" and s.quality.rules.priority_range == base.quality.rules.priority_range
    assert set(s.policies) == set(base.policies) | {"payments"}
    conf.write_text("policies: null\nspark: {conf: {spark.ui.enabled: null}}\n")  # null: back to the built-in default
    s = S.load(conf, env={})
    assert s.policies == {} and "spark.ui.enabled" not in s.spark.conf and s.spark.master == base.spark.master


def test_environment_overrides(tmp_path):
    s = S.load(env={"MSGLAKE_LAKE_ROOT": str(tmp_path), "MSGLAKE_SPARK_MASTER": "local[1]",
                    "MSGLAKE_JARS_DIR": "/opt/jars"})
    assert s.lake.root == str(tmp_path) and s.spark.master == "local[1]" and s.spark.jarsDir == "/opt/jars"
    conf = tmp_path / "c.yaml"
    conf.write_text("lake: {root: elsewhere}\n")
    assert S.load(env={"MSGLAKE_CONF": str(conf)}).lake.root == "elsewhere"


def test_source_lookup():
    s = S.from_dict({"sources": [{"name": "a", "format": "nsq-ext", "path": "p"},
                                 {"name": "b", "format": "nsq-ext", "path": "q"}]})
    assert s.source("b").path == "q"
    with pytest.raises(ConfigError, match="give a source name"):
        s.source()
    with pytest.raises(ConfigError, match="no source named 'c'"):
        s.source("c")


def test_missing_jars_say_how_to_fetch_them(tmp_path):
    s = S.from_dict({"spark": {"jarsDir": str(tmp_path)}})
    with pytest.raises(SetupError, match="make setup"):
        delta_jars(s)


def test_jars_are_there_after_setup():
    jars = delta_jars(S.from_dict(S.default_document()))
    assert any("delta-spark_4.2_2.13" in j for j in jars) and any("delta-storage" in j for j in jars)
