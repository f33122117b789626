package io.palkit.core.bundle;

/** One entry of the manifest's "files" table: what a bundle file must hash to. */
public final class FileEntry {
    public final String path;
    public final String sha256;
    public final long bytes;

    FileEntry(String path, String sha256, long bytes) {
        this.path = path;
        this.sha256 = sha256;
        this.bytes = bytes;
    }
}
