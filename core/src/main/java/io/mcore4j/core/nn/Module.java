package io.mcore4j.core.nn;

import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A component that owns parameters. Layers implement it so that optimizers, gradient
 * synchronisation and checkpoints can handle every layer alike.
 */
public interface Module extends AutoCloseable {

    /**
     * The parameters this module owns, its sub-modules' included, in a stable order.
     *
     * @return never null, possibly empty
     */
    List<Parameter> parameters();

    /**
     * The parameters under their layout-independent names ({@code prefix + path + name}), in the
     * order of {@link #parameters()}: the keys the checkpoint and the optimizer state use. The
     * default prefixes each parameter's own name; modules with sub-modules override it to add
     * their paths.
     *
     * @param prefix the module path ending in a dot, or empty
     * @return never null
     */
    default Map<String, Parameter> namedParameters(String prefix) {
        Map<String, Parameter> out = new LinkedHashMap<>();
        for (Parameter p : parameters()) {
            if (out.put(prefix + p.name(), p) != null) {
                throw new IllegalStateException("two parameters are named " + prefix + p.name());
            }
        }
        return out;
    }

    /**
     * This rank's pieces of the module's state for a checkpoint, keyed {@code prefix + name}. The
     * default describes each parameter by its partition, with this rank as the main replica for
     * split weights and for replicated ones; layers whose replicated weights are held by several
     * ranks of a group override it to mark all but one as non-main replicas.
     *
     * @param prefix the module path ending in a dot, or empty
     * @return never null
     */
    default List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>();
        for (Parameter p : parameters()) {
            out.add(p.sharded(prefix, 0));
        }
        return out;
    }

    /** Closes every parameter. */
    @Override
    default void close() {
        for (Parameter p : parameters()) {
            p.close();
        }
    }
}
