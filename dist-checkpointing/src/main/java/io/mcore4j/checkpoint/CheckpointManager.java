package io.mcore4j.checkpoint;

import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The checkpoints of one training run under a root directory: one directory per iteration
 * ({@code root/iter_0000100}), a {@code latest} marker naming the newest complete one, and
 * keep-last-N rotation.
 *
 * <p>A save writes into a staging directory ({@code root/iter_0000100.saving}), never into the
 * iteration's own directory, so re-saving an iteration that already has a complete checkpoint (e.g.
 * the one just loaded) leaves that checkpoint untouched until the new one is complete. Committing
 * then moves the staging directory into place (the old one, if any, is first renamed to
 * {@code iter_0000100.replaced} and deleted after the move), rewrites the marker atomically
 * (temporary file, fsync, rename) and deletes iteration directories older than the {@code keepLast}
 * newest complete ones (their {@code mcore4j_metadata.json} first, so a half-deleted directory never looks
 * complete), plus staging leftovers of interrupted saves. The marker holds the iteration number as
 * text. A process killed or a disk filling up during a save therefore leaves the marker on the
 * previous checkpoint, which stays loadable; if the marker ever names a directory that is not
 * complete (a kill between the two renames of a re-save), {@link #latestIteration()} falls back to
 * the newest older complete checkpoint and says so at WARN.
 *
 * <p>Create one manager per rank over the same root. The save methods and {@link #commit} are
 * collectives over {@code world} (see {@link DistCheckpointing}); the rest only read the file
 * system. A manager remembers its pending asynchronous save: the next save finishes it first, so a
 * background failure not yet seen through {@link AsyncSave#finish()} surfaces there. Not thread-safe.
 */
public final class CheckpointManager {
    /** Name of the marker file under the root. */
    public static final String LATEST_MARKER = "latest";
    /**
     * The common-state entry in which every save records its iteration; a load refuses a checkpoint
     * whose entry disagrees with its directory's name.
     */
    public static final String ITERATION_KEY = "iteration";

    private static final Logger LOG = LoggerFactory.getLogger(CheckpointManager.class);
    private static final Pattern ITERATION_DIR = Pattern.compile("iter_(\\d+)");
    /** Suffix of the directory a save writes before it is committed. */
    static final String STAGING_SUFFIX = ".saving";
    /** Suffix of a complete checkpoint being replaced by a re-save of the same iteration. */
    static final String REPLACED_SUFFIX = ".replaced";
    private static final Pattern LEFTOVER_DIR = Pattern.compile("(iter_\\d+)(\\.saving|\\.replaced)");

    private final Path root;
    private final int keepLast;
    private AsyncSave pending;

    /**
     * @param root directory holding the iteration directories (created on the first save)
     * @param keepLast how many complete checkpoints to keep; {@code Integer.MAX_VALUE} keeps all
     * @throws IllegalArgumentException if {@code keepLast < 1}
     */
    public CheckpointManager(Path root, int keepLast) {
        if (keepLast < 1) {
            throw new IllegalArgumentException("keepLast " + keepLast + " must be at least 1 (the latest checkpoint is never deleted)");
        }
        this.root = root;
        this.keepLast = keepLast;
    }

    /** @return the root directory */
    public Path root() {
        return root;
    }

    /** @return how many complete checkpoints rotation keeps */
    public int keepLast() {
        return keepLast;
    }

    /**
     * @param iteration a training iteration, non-negative
     * @return {@code root/iter_NNNNNNN} (seven digits, more when needed)
     */
    public Path directoryFor(long iteration) {
        if (iteration < 0) {
            throw new IllegalArgumentException("iteration " + iteration + " is negative");
        }
        return root.resolve(String.format("iter_%07d", iteration));
    }

    /**
     * The directory a save of {@code iteration} writes before {@link #commit} moves it to
     * {@link #directoryFor}{@code (iteration)}.
     *
     * @param iteration a training iteration, non-negative
     * @return {@code root/iter_NNNNNNN.saving}
     */
    public Path stagingDirectoryFor(long iteration) {
        Path dir = directoryFor(iteration);
        return dir.resolveSibling(dir.getFileName() + STAGING_SUFFIX);
    }

    /**
     * The newest complete checkpoint: the one the {@code latest} marker names or, when there is no
     * marker (checkpoints saved with {@link DistCheckpointing} directly into
     * {@link #directoryFor} directories), the complete iteration directory with the highest iteration.
     * If the marker names an incomplete directory, the newest complete one older than it (with a WARN).
     *
     * @return its directory, or empty if there is none
     * @throws CorruptCheckpointException if the marker is unreadable, or names an incomplete
     *         directory and no older complete checkpoint exists
     */
    public Optional<Path> latest() {
        OptionalLong iteration = latestIteration();
        return iteration.isPresent() ? Optional.of(directoryFor(iteration.getAsLong())) : Optional.empty();
    }

    /**
     * @return the iteration of {@link #latest()}, or empty
     * @throws CorruptCheckpointException as for {@link #latest()}
     */
    public OptionalLong latestIteration() {
        Path marker = root.resolve(LATEST_MARKER);
        String text;
        try {
            text = Files.readString(marker, StandardCharsets.UTF_8).trim();
        } catch (NoSuchFileException e) {
            List<Long> complete = completeIterations();
            return complete.isEmpty() ? OptionalLong.empty() : OptionalLong.of(complete.get(complete.size() - 1));
        } catch (IOException e) {
            throw new CorruptCheckpointException("cannot read the marker " + marker + ": " + e, e);
        }
        long iteration;
        try {
            iteration = Long.parseLong(text);
        } catch (NumberFormatException e) {
            // not chained: the parser's own message ("For input string") is no news, and front-ends that report
            // the bad-input exception of a failure's cause chain would print it instead of this one
            throw new CorruptCheckpointException("the marker " + marker + " holds \"" + text
                    + "\", not an iteration number (it should hold the iteration of the latest checkpoint;"
                    + " write it, or delete the marker to use the newest complete checkpoint)");
        }
        if (iteration < 0) {
            throw new CorruptCheckpointException("the marker " + marker + " holds the negative iteration " + iteration);
        }
        Path dir = directoryFor(iteration);
        if (!DistCheckpointing.isComplete(dir)) {
            String problem = "the marker " + marker + " names iteration " + iteration + " but " + dir
                    + " holds no complete checkpoint (no " + CheckpointMetadata.FILE_NAME + ")";
            List<Long> complete = completeIterations();
            for (int i = complete.size() - 1; i >= 0; i--) {
                if (complete.get(i) < iteration) {
                    LOG.warn("{}; using the newest older complete checkpoint, iteration {}", problem, complete.get(i));
                    return OptionalLong.of(complete.get(i));
                }
            }
            throw new CorruptCheckpointException(problem + ", and no older complete checkpoint exists under " + root);
        }
        return OptionalLong.of(iteration);
    }

    /** @return the iterations whose directories hold a complete checkpoint, ascending */
    public List<Long> completeIterations() {
        List<Long> out = new ArrayList<>();
        for (long iteration : iterationDirectories()) {
            if (DistCheckpointing.isComplete(directoryFor(iteration))) {
                out.add(iteration);
            }
        }
        return out;
    }

    /**
     * Saves {@code state} as iteration {@code iteration}, then {@link #commit commits} it.
     *
     * @param iteration the training iteration
     * @param state this rank's shards
     * @param common non-tensor state (rank 0's is stored)
     * @param world communicator over all ranks
     */
    public void save(long iteration, List<ShardedTensor> state, Map<String, Object> common, Communicator world) {
        save(iteration, state, common, world, SaveOptions.defaults());
    }

    /**
     * {@link #save(long, List, Map, Communicator)} with options.
     *
     * @param iteration the training iteration
     * @param state this rank's shards
     * @param common non-tensor state
     * @param world communicator over all ranks
     * @param options save options
     */
    public void save(long iteration, List<ShardedTensor> state, Map<String, Object> common, Communicator world,
                     SaveOptions options) {
        finishPending();
        DistCheckpointing.save(stagingDirectoryFor(iteration), state, withIteration(iteration, common), world, options);
        commit(iteration, world);
    }

    /**
     * Starts an asynchronous save of iteration {@code iteration}; its {@link AsyncSave#finish()}
     * also commits it. A pending earlier save is finished first.
     *
     * @param iteration the training iteration
     * @param state this rank's shards
     * @param common non-tensor state
     * @param world communicator over all ranks
     * @return the running save
     */
    public AsyncSave saveAsync(long iteration, List<ShardedTensor> state, Map<String, Object> common, Communicator world) {
        return saveAsync(iteration, state, common, world, SaveOptions.defaults());
    }

    /**
     * {@link #saveAsync(long, List, Map, Communicator)} with options.
     *
     * @param iteration the training iteration
     * @param state this rank's shards
     * @param common non-tensor state
     * @param world communicator over all ranks
     * @param options save options
     * @return the running save
     */
    public AsyncSave saveAsync(long iteration, List<ShardedTensor> state, Map<String, Object> common,
                               Communicator world, SaveOptions options) {
        finishPending();
        AsyncSave save = DistCheckpointing.saveAsync(stagingDirectoryFor(iteration), state,
                withIteration(iteration, common), world, options);
        save.afterCommit(() -> commit(iteration, world));
        pending = save;
        return save;
    }

    /**
     * Finishes the pending asynchronous save, if any (a collective when there is one; every rank's
     * manager has the same pending save). Call before exiting.
     *
     * @throws CheckpointException on every rank if that save failed
     */
    public void finishPending() {
        AsyncSave save = pending;
        pending = null;
        if (save != null && !save.isFinished()) {
            save.finish();
        }
    }

    /**
     * Moves a complete staged save of {@code iteration} into place, marks it as latest and rotates
     * old checkpoints. Collective: rank 0 renames, writes and deletes, and every rank returns once it
     * has. Use it after saving with {@link DistCheckpointing} into {@link #stagingDirectoryFor(long)}
     * (or {@link #directoryFor(long)}) yourself.
     *
     * @param iteration an iteration whose checkpoint is complete (staged or in place)
     * @param world communicator over all ranks
     * @throws CheckpointException on every rank if the directory is incomplete or the marker cannot be written
     */
    public void commit(long iteration, Communicator world) {
        Throwable failure = null;
        if (world.rank() == 0) {
            try {
                Path dir = directoryFor(iteration);
                moveStagedIntoPlace(iteration);
                if (!DistCheckpointing.isComplete(dir)) {
                    throw new CorruptCheckpointException("cannot mark " + dir + " as latest: it holds no "
                            + CheckpointMetadata.FILE_NAME);
                }
                DurableFiles.writeAtomically(root.resolve(LATEST_MARKER),
                        (iteration + "\n").getBytes(StandardCharsets.UTF_8), true);
                rotate(iteration);
            } catch (RuntimeException | IOException e) {
                failure = e instanceof IOException
                        ? new CheckpointException("cannot write the marker under " + root + ": " + e, e) : e;
            }
        }
        RankAgreement.agree(world, "committing iteration " + iteration + " under " + root, failure);
    }

    /**
     * Loads the latest checkpoint, if there is one.
     *
     * @param targets this rank's tensors to fill
     * @param world communicator over all ranks
     * @param strict what to do about missing and unexpected keys
     * @return the load's result, or empty when no checkpoint exists (then nothing is touched)
     */
    public Optional<LoadResult> loadLatest(List<ShardedTensor> targets, Communicator world, StrictMode strict) {
        OptionalLong iteration = latestIteration();
        if (iteration.isEmpty()) {
            return Optional.empty();
        }
        Path dir = directoryFor(iteration.getAsLong());
        LoadResult result = DistCheckpointing.load(dir, targets, world, strict);
        checkRecordedIteration(dir, iteration.getAsLong(), result.common());
        return Optional.of(result);
    }

    /**
     * A copy of {@code common} with {@link #ITERATION_KEY} set to {@code iteration}.
     *
     * @throws IllegalArgumentException if {@code common} already records another iteration
     */
    private static Map<String, Object> withIteration(long iteration, Map<String, Object> common) {
        Object given = common.get(ITERATION_KEY);
        if (given != null && !(given instanceof Number n && n.longValue() == iteration
                && n.doubleValue() == (double) iteration)) {
            throw new IllegalArgumentException("the common state records " + ITERATION_KEY + " = " + given
                    + " but the save is of iteration " + iteration);
        }
        Map<String, Object> out = new LinkedHashMap<>(common);
        out.put(ITERATION_KEY, iteration);
        return out;
    }

    /**
     * Refuses a checkpoint whose recorded iteration is not the one its directory (and the marker)
     * name: resuming would skip or repeat iterations without a word. Checkpoints written without the
     * entry (by {@link DistCheckpointing} directly) are not checked.
     */
    private static void checkRecordedIteration(Path dir, long iteration, Map<String, Object> common) {
        if (!common.containsKey(ITERATION_KEY)) {
            return;
        }
        Object recorded = common.get(ITERATION_KEY);
        if (!(recorded instanceof Long l) || l != iteration) {
            throw new CorruptCheckpointException(CheckpointMetadata.locate(dir) + " records "
                    + ITERATION_KEY + " = " + recorded + " but the directory " + dir.getFileName()
                    + " is the checkpoint of iteration " + iteration + "; refusing to resume from a checkpoint"
                    + " whose iteration is in doubt (was it renamed or edited?)");
        }
    }

    /**
     * If a complete staged save of {@code iteration} exists, puts it at {@link #directoryFor}: an
     * existing directory there is renamed aside first and deleted only after the move, so a complete
     * checkpoint of this iteration exists under one of the two names at every moment.
     */
    private void moveStagedIntoPlace(long iteration) throws IOException {
        Path staged = stagingDirectoryFor(iteration);
        if (!DistCheckpointing.isComplete(staged)) {
            return;
        }
        Path dir = directoryFor(iteration);
        Path replaced = dir.resolveSibling(dir.getFileName() + REPLACED_SUFFIX);
        DurableFiles.deleteTree(replaced);
        boolean hadOld = Files.exists(dir);
        if (hadOld) {
            Files.move(dir, replaced, StandardCopyOption.ATOMIC_MOVE);
        }
        Files.move(staged, dir, StandardCopyOption.ATOMIC_MOVE);
        DurableFiles.fsyncDirectory(root);
        if (hadOld) {
            CheckpointMetadata.deleteMarkers(replaced);
            DurableFiles.deleteTree(replaced);
        }
    }

    /** Deletes every iteration directory older than the {@code keepLast} newest complete ones up to {@code latest}. */
    private void rotate(long latest) {
        List<Long> kept = new ArrayList<>();
        List<Long> complete = completeIterations();
        for (int i = complete.size() - 1; i >= 0 && kept.size() < keepLast; i--) {
            if (complete.get(i) <= latest) {
                kept.add(complete.get(i));
            }
        }
        long oldestKept = kept.isEmpty() ? latest : kept.get(kept.size() - 1);
        for (long iteration : iterationDirectories()) {
            if (iteration >= oldestKept) {
                break;
            }
            Path dir = directoryFor(iteration);
            try {
                CheckpointMetadata.deleteMarkers(dir);
                DurableFiles.fsyncDirectory(dir);
                DurableFiles.deleteTree(dir);
            } catch (IOException e) {
                LOG.warn("keep-last-{} rotation could not delete {}: {}", keepLast, dir, e.toString());
            }
        }
        deleteLeftovers();
    }

    /** Deletes the staging and replaced directories of interrupted saves (no save is running during a commit). */
    private void deleteLeftovers() {
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(root)) {
            for (Path p : entries) {
                Matcher m = LEFTOVER_DIR.matcher(p.getFileName().toString());
                if (!m.matches() || !Files.isDirectory(p)) {
                    continue;
                }
                if (m.group(2).equals(REPLACED_SUFFIX) && !DistCheckpointing.isComplete(root.resolve(m.group(1)))
                        && DistCheckpointing.isComplete(p)) {
                    LOG.warn("{} is the only complete copy of {} (a re-save was interrupted between its renames); "
                            + "keeping it: rename it back to recover that iteration", p, m.group(1));
                    continue;
                }
                try {
                    CheckpointMetadata.deleteMarkers(p);
                    DurableFiles.deleteTree(p);
                } catch (IOException e) {
                    LOG.warn("could not delete the leftover {} of an interrupted save: {}", p, e.toString());
                }
            }
        } catch (IOException e) {
            LOG.warn("could not list {} for leftovers of interrupted saves: {}", root, e.toString());
        }
    }

    /**
     * Every save's directory under the root, complete or not: the iteration directories and the
     * staging and replaced directories that interrupted saves leave ({@code iter_N.saving},
     * {@code iter_N.replaced}). Reads only the directory listing.
     *
     * @return the directories, sorted by name; empty when the root does not exist
     * @throws CheckpointException if the root cannot be listed
     */
    public List<Path> saveDirectories() {
        if (!Files.isDirectory(root)) {
            return List.of();
        }
        List<Path> out = new ArrayList<>();
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(root)) {
            for (Path p : entries) {
                String name = p.getFileName().toString();
                if ((ITERATION_DIR.matcher(name).matches() || LEFTOVER_DIR.matcher(name).matches()) && Files.isDirectory(p)) {
                    out.add(p);
                }
            }
        } catch (IOException e) {
            throw new CheckpointException("cannot list " + root + ": " + e, e);
        }
        out.sort(null);
        return out;
    }

    /** @return the iterations that have a directory under the root, ascending */
    private List<Long> iterationDirectories() {
        TreeSet<Long> found = new TreeSet<>();
        if (!Files.isDirectory(root)) {
            return new ArrayList<>();
        }
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(root)) {
            for (Path p : entries) {
                Matcher m = ITERATION_DIR.matcher(p.getFileName().toString());
                if (m.matches() && Files.isDirectory(p) && m.group(1).length() <= 18) {
                    long iteration = Long.parseLong(m.group(1));
                    if (directoryFor(iteration).equals(p)) {
                        found.add(iteration);
                    }
                }
            }
        } catch (IOException e) {
            throw new CheckpointException("cannot list " + root + ": " + e, e);
        }
        return new ArrayList<>(found);
    }
}
