package io.mcore4j.checkpoint;

/**
 * A checkpoint directory cannot be trusted: {@code mcore4j_metadata.json} is absent (the save never
 * completed) or unreadable, or a shard file is missing, has the wrong size or fails its CRC32C
 * checksum, or its safetensors header disagrees with the metadata. The message names the file.
 */
public class CorruptCheckpointException extends CheckpointException {
    private static final long serialVersionUID = 1L;

    /** @param message what is wrong, naming the file */
    public CorruptCheckpointException(String message) {
        super(message);
    }

    /**
     * @param message what is wrong, naming the file
     * @param cause the original failure
     */
    public CorruptCheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
