package io.mcore4j.checkpoint;

import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Saves and loads sharded checkpoints: Megatron-Core's {@code dist_checkpointing} for mcore4j.
 *
 * <p><b>Layout on disk.</b> A checkpoint is a directory holding one safetensors file per rank that
 * has main replicas ({@code rank_00003.safetensors}; each tensor inside is named
 * {@code key@offset0,offset1,...}, so any Python safetensors reader opens it) and
 * {@code mcore4j_metadata.json}: the format version, each file's size and CRC32C, each key's dtype, global
 * shape and stored blocks, and the caller's common (non-tensor) state. Files are written under a
 * temporary name, forced to disk and renamed; {@code mcore4j_metadata.json} comes last and is what makes
 * the directory a checkpoint, so a save killed half-way leaves no loadable directory behind.
 *
 * <p><b>Keys are layout-free.</b> A {@link ShardedTensor} places a rank's piece in the global tensor
 * by offsets, so tensor, pipeline, data, expert and virtual pipeline parallel sizes may all differ
 * between save and load: each rank reads only the stored blocks that overlap the blocks it asks for.
 *
 * <p><b>Collectives.</b> Every method that takes {@code world} is a collective over it: all ranks
 * of the job call it in the same order with the same directory and options (that is
 * {@code ProcessGroups.world()}). Any rank's failure is raised on every rank, with the same type
 * and message.
 *
 * <p><b>Common state</b> is JSON: {@code String}, {@code Number}, {@code Boolean}, {@code List},
 * {@code Map<String, Object>} and {@code null}, nested freely. Only rank 0's map is stored (other
 * ranks may pass the same map, an empty one or {@code null}). It comes back normalised: integers
 * as {@code Long}, other numbers as {@code Double}. Keep it free of timestamps you do not mean to
 * compare: equal state gives byte-identical files.
 */
public final class DistCheckpointing {
    private DistCheckpointing() {}

    /**
     * Saves {@code state} to {@code dir} and returns once the checkpoint is complete on disk.
     *
     * @param dir the checkpoint directory (created if absent; an earlier checkpoint there is replaced,
     *     its {@code mcore4j_metadata.json} removed first)
     * @param state this rank's shards; replicas with {@code replicaId != 0} are validated but not written
     * @param common non-tensor state (rank 0's is stored)
     * @param world communicator over all ranks
     * @throws InvalidShardingException on every rank if the main replicas do not tile every tensor
     *     exactly (overlap or gap, naming the key), or ranks disagree on a key's dtype or shape
     * @throws CheckpointException on every rank if any rank fails to write
     */
    public static void save(Path dir, List<ShardedTensor> state, Map<String, Object> common, Communicator world) {
        save(dir, state, common, world, SaveOptions.defaults());
    }

    /**
     * {@link #save(Path, List, Map, Communicator)} with options.
     *
     * @param dir the checkpoint directory
     * @param state this rank's shards
     * @param common non-tensor state
     * @param world communicator over all ranks
     * @param options fsync, chunking, listener
     */
    public static void save(Path dir, List<ShardedTensor> state, Map<String, Object> common, Communicator world,
                            SaveOptions options) {
        new AsyncSave(SaveSession.start(dir, state, common, world, options, false)).finish();
    }

    /**
     * Starts a save whose files are written on a background thread. Returns after validating the
     * sharding (collectively) and copying this rank's main replicas to host memory; the caller may
     * modify {@code state}'s tensors and {@code common} at once. Call {@link AsyncSave#finish()} on
     * every rank to complete the checkpoint.
     *
     * @param dir the checkpoint directory
     * @param state this rank's shards
     * @param common non-tensor state (rank 0's is stored; copied here)
     * @param world communicator over all ranks
     * @return the running save
     * @throws InvalidShardingException on every rank, as for {@link #save}; nothing is written then
     */
    public static AsyncSave saveAsync(Path dir, List<ShardedTensor> state, Map<String, Object> common,
                                      Communicator world) {
        return saveAsync(dir, state, common, world, SaveOptions.defaults());
    }

    /**
     * {@link #saveAsync(Path, List, Map, Communicator)} with options.
     *
     * @param dir the checkpoint directory
     * @param state this rank's shards
     * @param common non-tensor state
     * @param world communicator over all ranks
     * @param options fsync, chunking, listener
     * @return the running save
     */
    public static AsyncSave saveAsync(Path dir, List<ShardedTensor> state, Map<String, Object> common,
                                      Communicator world, SaveOptions options) {
        return new AsyncSave(SaveSession.start(dir, state, common, world, options, true));
    }

    /**
     * Fills {@code targets} in place from the checkpoint in {@code dir}, resharding as needed.
     *
     * <p>Each target names a key, its global shape and this rank's block (offsets and the data's
     * shape) in the new layout; its {@code data} is overwritten (autograd off, identity and
     * requires-grad flag kept) with the stored values of that block. Replica ids of targets are
     * ignored: every replica is filled. Targets whose key is missing are left untouched.
     *
     * @param dir a checkpoint directory
     * @param targets this rank's tensors to fill
     * @param world communicator over all ranks
     * @param strict what to do about missing and unexpected keys
     * @return the common state and the missing and unexpected keys (the same on every rank)
     * @throws CorruptCheckpointException on every rank if {@code mcore4j_metadata.json} is absent or
     *     malformed, or a needed file is missing, of the wrong size or fails its checksum (naming the file)
     * @throws IncompatibleCheckpointException on every rank for a newer format version, a key whose
     *     global shape or dtype differs (naming both), or keys {@code strict} raises on
     */
    public static LoadResult load(Path dir, List<ShardedTensor> targets, Communicator world, StrictMode strict) {
        return load(dir, targets, world, strict, LoadOptions.defaults());
    }

    /**
     * {@link #load(Path, List, Communicator, StrictMode)} with options.
     *
     * @param dir a checkpoint directory
     * @param targets this rank's tensors to fill
     * @param world communicator over all ranks
     * @param strict what to do about missing and unexpected keys
     * @param options checksum verification, staging size
     * @return the common state and the missing and unexpected keys
     */
    public static LoadResult load(Path dir, List<ShardedTensor> targets, Communicator world, StrictMode strict,
                                  LoadOptions options) {
        return CheckpointLoader.load(dir, targets, world, strict, options);
    }

    /**
     * Reads only the common state of a checkpoint; no communication, no tensor is read.
     *
     * @param dir a checkpoint directory
     * @return the common state (integers as {@code Long}, other numbers as {@code Double})
     * @throws CorruptCheckpointException if {@code mcore4j_metadata.json} is absent or malformed
     * @throws IncompatibleCheckpointException if it was written by a newer format version
     */
    public static Map<String, Object> loadCommon(Path dir) {
        return CheckpointMetadata.read(dir).common();
    }

    /**
     * {@link #loadCommon} with typed getters.
     *
     * @param dir a checkpoint directory
     * @return the common state
     * @throws CorruptCheckpointException if {@code mcore4j_metadata.json} is absent or malformed
     * @throws IncompatibleCheckpointException if it was written by a newer format version
     */
    public static CommonState loadCommonState(Path dir) {
        return new CommonState(loadCommon(dir));
    }

    /**
     * The tensors a checkpoint stores, with dtype and global shape; reads only its metadata.
     *
     * @param dir a checkpoint directory
     * @return the tensors by key, sorted
     * @throws CorruptCheckpointException if the metadata is absent or malformed
     * @throws IncompatibleCheckpointException if it was written by a newer format version
     */
    public static SortedMap<String, StoredTensorInfo> storedTensors(Path dir) {
        SortedMap<String, StoredTensorInfo> out = new TreeMap<>();
        CheckpointMetadata.read(dir).tensors().forEach((key, t) -> out.put(key,
                new StoredTensorInfo(key, t.dtype(), t.shape())));
        return out;
    }

    /**
     * Whether {@code dir} holds a complete checkpoint (its {@code mcore4j_metadata.json} exists); reads nothing else.
     *
     * @param dir a directory
     * @return true if a save into it completed
     */
    public static boolean isComplete(Path dir) {
        return CheckpointMetadata.locate(dir) != null;
    }
}
