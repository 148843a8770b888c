"""msglake's local file system (jars/src/msglake/hadoop): Hadoop's own answers, without its processes.

Each check runs the same call through Hadoop's own ``RawLocalFileSystem`` (the reference: it
starts ``chmod`` and ``readlink`` processes) and through msglake's, in the suite's JVM.
"""
from __future__ import annotations

import os
import shutil
import stat

import pytest

from msglake.pipelines.session import LOCAL_FS, LOCAL_FS_JAR, jars_dir, local_fs_conf

from tests.conftest import make_settings


@pytest.fixture(scope="module")
def hadoop(spark):
    """(jvm, Hadoop configuration); the module is skipped when the jar was not built for want of
    a javac (make setup says so), and fails when it should have been."""
    if not (jars_dir(make_settings("/tmp")) / LOCAL_FS_JAR).is_file():
        if shutil.which("javac"):
            pytest.fail(f"javac is here but {LOCAL_FS_JAR} was not built: run make setup")
        pytest.skip("no javac: msglake's local file system is not built")
    return spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()


def _raw(jvm, conf, ours: bool):
    fs = jvm.msglake.hadoop.LocalFileSystem.Raw() if ours else jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    fs.initialize(jvm.java.net.URI("file:///"), conf)
    return fs


def test_the_session_writes_files_through_msglakes_file_systems(spark, hadoop, tmp_path):
    jvm, conf = hadoop
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == LOCAL_FS["spark.hadoop.fs.file.impl"]
    context = jvm.org.apache.hadoop.fs.FileContext.getLocalFSFileContext(conf)
    assert context.getDefaultFileSystem().getClass().getName() == LOCAL_FS["spark.hadoop.fs.AbstractFileSystem.file.impl"]
    # A partitioned Delta write: the modes Hadoop gives its files and folders (umask applied).
    path = tmp_path / "t"
    spark.createDataFrame([("a", 1, b"x"), ("b", 2, b"y")], "topic string, partition int, body binary") \
        .write.format("delta").partitionBy("topic", "partition").save(str(path))
    reference = _raw(jvm, conf, ours=False)
    expected_file, expected_folder = tmp_path / "reference-file", tmp_path / "reference-folder"
    reference.create(jvm.org.apache.hadoop.fs.Path(str(expected_file))).close()
    reference.mkdirs(jvm.org.apache.hadoop.fs.Path(str(expected_folder)))
    folder_mode, file_mode = (stat.S_IMODE(os.stat(p).st_mode) for p in (expected_folder, expected_file))
    for folder, _, files in os.walk(path):
        assert stat.S_IMODE(os.stat(folder).st_mode) == folder_mode, folder
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode) == file_mode, name
    assert spark.read.format("delta").load(str(path)).count() == 2


@pytest.mark.parametrize("mode", [0o000, 0o400, 0o600, 0o640, 0o644, 0o700, 0o711, 0o750, 0o755, 0o777, 0o1777])
def test_permissions_set_as_hadoop_sets_them(hadoop, tmp_path, mode):
    jvm, conf = hadoop
    modes = []
    for ours in (False, True):
        f = tmp_path / f"f-{ours}"
        f.write_bytes(b"")
        os.chmod(f, 0o600 if mode else 0o644)
        _raw(jvm, conf, ours).setPermission(jvm.org.apache.hadoop.fs.Path(str(f)),
                                            jvm.org.apache.hadoop.fs.permission.FsPermission(mode))
        modes.append(stat.S_IMODE(os.stat(f).st_mode))
    assert modes[1] == modes[0] == mode


def test_link_status_as_hadoop_gives_it(hadoop, tmp_path):
    jvm, conf = hadoop
    (tmp_path / "file").write_bytes(b"12345")
    (tmp_path / "dir").mkdir()
    os.symlink(tmp_path / "file", tmp_path / "link")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")

    def status(fs, name):
        try:
            s = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(str(tmp_path / name)))
        except Exception as e:  # py4j wraps the Java exception
            return type(e).__name__, "FileNotFoundException" in str(e)
        return (s.isFile(), s.isDirectory(), s.isSymlink(), s.getLen(), str(s.getPath()),
                str(s.getSymlink()) if s.isSymlink() else None)

    reference, ours = _raw(jvm, conf, ours=False), _raw(jvm, conf, ours=True)
    for name in ("file", "dir", "link", "dangling", "missing"):
        assert status(ours, name) == status(reference, name), name
    assert status(ours, "link")[2] and status(ours, "missing")[1]


def test_checkpoint_files_renamed_through_filecontext(spark, hadoop, tmp_path):
    """Structured Streaming's and Delta's way: create a temporary file, rename it over."""
    jvm, conf = hadoop
    gateway = spark.sparkContext._gateway
    fs = jvm.org.apache.hadoop.fs
    fc = fs.FileContext.getLocalFSFileContext(conf)
    tmp, final = fs.Path(str(tmp_path / ".0.tmp")), fs.Path(str(tmp_path / "0"))
    opts = gateway.new_array(fs.Options.CreateOpts, 1)
    opts[0] = fs.Options.CreateOpts.createParent()
    out = fc.create(tmp, jvm.java.util.EnumSet.of(fs.CreateFlag.CREATE), opts)
    out.write(bytearray(b"v1\n"))
    out.close()
    how = gateway.new_array(fs.Options.Rename, 1)
    how[0] = fs.Options.Rename.OVERWRITE
    fc.rename(tmp, final, how)
    assert (tmp_path / "0").read_bytes() == b"v1\n" and not (tmp_path / ".0.tmp").exists()
    assert (tmp_path / ".0.crc").exists()  # still checksummed, as Hadoop's LocalFs does


def test_session_settings_for_the_file_systems(tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    doc = make_settings(tmp_path / "lake").model_dump()
    doc["spark"]["jarsDir"] = str(jars)
    from msglake.pipelines import settings as S

    settings = S.from_dict(doc, "test settings")
    assert local_fs_conf(settings, "local[2]", {}) == {}  # not built
    (jars / LOCAL_FS_JAR).write_bytes(b"")
    jar = str(jars / LOCAL_FS_JAR)
    assert local_fs_conf(settings, "local[2]", {}) == {"spark.driver.extraClassPath": jar, **LOCAL_FS}
    mine = {"spark.driver.extraClassPath": "/opt/x.jar"}
    assert local_fs_conf(settings, "local[*]", mine)["spark.driver.extraClassPath"] == "/opt/x.jar" + os.pathsep + jar
    assert local_fs_conf(settings, "spark://host:7077", {}) == {}  # executors elsewhere: Hadoop's own
    for key in LOCAL_FS:  # a user's own choice stands
        assert local_fs_conf(settings, "local[2]", {key: "org.apache.hadoop.fs.LocalFileSystem"}) == {}
