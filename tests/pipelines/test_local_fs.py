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


@pytest.mark.parametrize("mode", [0o000, *(1 << bit for bit in range(9)), 0o640, 0o755, 0o777, 0o1777])
def test_permissions_set_as_hadoop_sets_them(hadoop, tmp_path, mode):
    jvm, conf = hadoop
    fs = jvm.org.apache.hadoop.fs
    modes = []
    for ours in (False, True):
        f = tmp_path / f"f-{ours}"
        f.write_bytes(b"")
        os.chmod(f, 0o600 if mode else 0o644)
        _raw(jvm, conf, ours).setPermission(fs.Path(str(f)), fs.permission.FsPermission(mode))
        modes.append(stat.S_IMODE(os.stat(f).st_mode))
    assert modes[1] == modes[0] == mode


def test_created_files_and_folders_get_the_permission_asked_for(hadoop, tmp_path):
    """As Spark's writers and Delta's log create them: with a permission (umask applied by Hadoop)."""
    jvm, conf = hadoop
    fs = jvm.org.apache.hadoop.fs
    modes = {}
    for ours in (False, True):
        raw = _raw(jvm, conf, ours)
        base = tmp_path / str(ours)
        raw.mkdirs(fs.Path(str(base / "a" / "b")), fs.permission.FsPermission(0o750))
        raw.create(fs.Path(str(base / "a" / "f")), fs.permission.FsPermission(0o640), False, 4096, 1, 1 << 20,
                   None).close()
        modes[ours] = [stat.S_IMODE(os.stat(base / p).st_mode) for p in ("a", "a/b", "a/f")]
    # Hadoop makes missing parents with the process's umask, the folder asked for with its permission.
    assert modes[True] == modes[False] and modes[False][1:] == [0o750, 0o640]


def test_a_setgid_folder_keeps_its_bit_as_with_hadoops_chmod(hadoop, tmp_path):
    """chmod 0755 (the command Hadoop starts) keeps a folder's setgid bit, and with it a shared
    folder's group inheritance; chmod(2) with the nine bits alone would clear it."""
    jvm, conf = hadoop
    fs = jvm.org.apache.hadoop.fs
    modes = []
    for ours in (False, True):
        parent = tmp_path / f"shared-{ours}"
        parent.mkdir()
        os.chmod(parent, 0o2775)
        raw = _raw(jvm, conf, ours)
        raw.mkdirs(fs.Path(str(parent / "topic=a")), fs.permission.FsPermission(0o755))
        raw.setPermission(fs.Path(str(parent)), fs.permission.FsPermission(0o755))
        modes.append([stat.S_IMODE(os.stat(p).st_mode) for p in (parent, parent / "topic=a")])
    assert modes[1] == modes[0] and modes[0][0] & stat.S_ISGID


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
    # Delta's log relies on a rename that must not replace an existing commit file.
    again = fs.Path(str(tmp_path / ".1.tmp"))
    fc.create(again, jvm.java.util.EnumSet.of(fs.CreateFlag.CREATE), opts).close()
    how[0] = fs.Options.Rename.NONE
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        fc.rename(again, final, how)
    assert (tmp_path / "0").read_bytes() == b"v1\n"


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
    for master in ("spark://host:7077", "local-cluster[2,1,1024]"):  # executors elsewhere: Hadoop's own
        assert local_fs_conf(settings, master, {}) == {}
    for key in LOCAL_FS:  # a user's own choice stands
        assert local_fs_conf(settings, "local[2]", {key: "org.apache.hadoop.fs.LocalFileSystem"}) == {}
