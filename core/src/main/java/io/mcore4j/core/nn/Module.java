package io.mcore4j.core.nn;

import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.List;

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
