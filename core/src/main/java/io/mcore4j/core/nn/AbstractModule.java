package io.mcore4j.core.nn;

import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The base of a module that registers its children and its own parameters once, in its
 * constructor; {@link #parameters()}, {@link #namedParameters}, {@link #shardedState} and
 * {@link #close()} are derived from that registry, so a composite writes no walk of its own.
 *
 * <p><b>Order and keys.</b> Entries keep their registration order, which is the order of
 * {@link #parameters()} (the optimizer's order) and of the other views. A key is the caller's prefix,
 * then the entry's path, then (for a child) the child's own keys: a parameter {@code "weight"}
 * registered at path {@code ""} of a child registered at {@code "linear_fc1."} under prefix
 * {@code "decoder.layers.3.mlp."} is {@code "decoder.layers.3.mlp.linear_fc1.weight"}. Paths are
 * empty or end with a dot.
 *
 * <p><b>Replicas.</b> A checkpoint needs exactly one main replica of every element. A parameter is
 * registered with the replica id this rank's copy has (0: this rank writes it; e.g. the
 * tensor-parallel rank for a weight every TP rank holds whole). A child registered as a non-main
 * replica (e.g. a dense block on a data-parallel rank above 0) has every piece it describes marked
 * as a non-main replica ({@link ShardedTensor#replicatedIf}).
 *
 * <p>Not thread-safe: register from the constructor, then share the module read-only.
 */
public abstract class AbstractModule implements Module {
    private final List<Entry> entries = new ArrayList<>();

    /** Creates a module with an empty registry. */
    protected AbstractModule() {}

    /**
     * Registers a parameter this module owns directly, keyed by its name, written by this rank.
     *
     * @param parameter the parameter
     * @return {@code parameter}
     */
    protected final Parameter registerParameter(Parameter parameter) {
        return registerParameter("", parameter, 0);
    }

    /**
     * Registers a parameter this module owns directly.
     *
     * @param path key segment before the parameter's name: empty, or ending with a dot
     * @param parameter the parameter
     * @param replicaId 0 if this rank's copy is the main replica for checkpoints, else its replica id
     * @return {@code parameter}
     * @throws IllegalArgumentException if the path is not empty and does not end with a dot, or the
     *     replica id is negative
     */
    protected final Parameter registerParameter(String path, Parameter parameter, int replicaId) {
        checkPath(path);
        if (replicaId < 0) {
            throw new IllegalArgumentException("replica id " + replicaId + " of parameter " + parameter.name()
                    + " must not be negative");
        }
        entries.add(new OwnParameter(path, Objects.requireNonNull(parameter, "parameter"), replicaId));
        return parameter;
    }

    /**
     * Registers a child module whose pieces this rank writes as the child describes them.
     *
     * @param path the child's key segment: empty, or ending with a dot (e.g. {@code "linear_fc1."})
     * @param child the child
     * @param <M> its type
     * @return {@code child}
     */
    protected final <M extends Module> M registerModule(String path, M child) {
        return registerModule(path, child, false);
    }

    /**
     * Registers a child module.
     *
     * @param path the child's key segment: empty, or ending with a dot
     * @param child the child
     * @param nonMainReplica whether every piece of the child on this rank is a copy written
     *     elsewhere (for example a dense block on a data-parallel rank above 0)
     * @param <M> its type
     * @return {@code child}
     * @throws IllegalArgumentException if the path is not empty and does not end with a dot, or the
     *     child is this module
     */
    protected final <M extends Module> M registerModule(String path, M child, boolean nonMainReplica) {
        checkPath(path);
        if (child == this) {
            throw new IllegalArgumentException("a module cannot be its own child (path '" + path + "')");
        }
        entries.add(new Child(path, Objects.requireNonNull(child, "child"), nonMainReplica));
        return child;
    }

    /**
     * The registered children, in registration order.
     *
     * @return an unmodifiable view, never null
     */
    public final List<Module> children() {
        List<Module> out = new ArrayList<>();
        for (Entry e : entries) {
            if (e instanceof Child c) {
                out.add(c.module());
            }
        }
        return Collections.unmodifiableList(out);
    }

    /** Own parameters and the children's, in registration order. */
    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>();
        for (Entry e : entries) {
            if (e instanceof OwnParameter p) {
                out.add(p.parameter());
            } else {
                out.addAll(((Child) e).module().parameters());
            }
        }
        return out;
    }

    /**
     * Parameters by key, in the order of {@link #parameters()}.
     *
     * @throws IllegalStateException if two parameters get the same key
     */
    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        Map<String, Parameter> out = new LinkedHashMap<>();
        for (Entry e : entries) {
            if (e instanceof OwnParameter p) {
                put(out, prefix + p.path() + p.parameter().name(), p.parameter());
            } else {
                Child c = (Child) e;
                c.module().namedParameters(prefix + c.path()).forEach((key, value) -> put(out, key, value));
            }
        }
        return out;
    }

    /** This rank's pieces, in registration order, with the replica ids the registry gives them. */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>();
        for (Entry e : entries) {
            if (e instanceof OwnParameter p) {
                out.add(p.parameter().sharded(prefix + p.path(), p.replicaId()));
            } else {
                Child c = (Child) e;
                for (ShardedTensor t : c.module().shardedState(prefix + c.path())) {
                    out.add(t.replicatedIf(c.nonMainReplica()));
                }
            }
        }
        return out;
    }

    /** Closes the children and own parameters, in registration order. */
    @Override
    public void close() {
        for (Entry e : entries) {
            if (e instanceof OwnParameter p) {
                p.parameter().close();
            } else {
                ((Child) e).module().close();
            }
        }
    }

    private static void put(Map<String, Parameter> out, String key, Parameter p) {
        if (out.put(key, p) != null) {
            throw new IllegalStateException("two parameters are named " + key);
        }
    }

    private static void checkPath(String path) {
        if (!path.isEmpty() && !path.endsWith(".")) {
            throw new IllegalArgumentException("key path '" + path + "' must be empty or end with a dot");
        }
    }

    private sealed interface Entry permits OwnParameter, Child {}

    private record OwnParameter(String path, Parameter parameter, int replicaId) implements Entry {}

    private record Child(String path, Module module, boolean nonMainReplica) implements Entry {}
}
