package msglake.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * The {@code file:} scheme for Hadoop's FileContext API ({@code fs.AbstractFileSystem.file.impl}):
 * Hadoop's {@code LocalFs} over {@link LocalFileSystem.Raw}. Delta's log and Structured
 * Streaming's checkpoint write through this API: each commit creates files (a {@code chmod}
 * process each) and renames them (a {@code readlink} process each) without it.
 */
public class LocalFs extends ChecksumFs {

    public LocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new RawFs(conf));
    }

    /** As Hadoop's {@code RawLocalFs}, over {@link LocalFileSystem.Raw}. */
    static class RawFs extends DelegateToFileSystem {

        RawFs(Configuration conf) throws IOException, URISyntaxException {
            // Hadoop's RawLocalFs names the file system by the local URI, whatever it was asked for.
            super(FsConstants.LOCAL_FS_URI, new LocalFileSystem.Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;  // no port
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        @Deprecated
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;  // as Hadoop's: the operating system decides
        }
    }
}
