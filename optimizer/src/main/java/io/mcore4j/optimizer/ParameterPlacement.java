package io.mcore4j.optimizer;

import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;

/**
 * Where the elements of one parameter sit in a global checkpoint tensor: the tensor's key and
 * global shape, and rectangular regions of the parameter's local tensor, each with its global
 * offset. The regions tile the local tensor exactly. A contiguous part of a weight is one region; a
 * strided part (a fused weight such as SwiGLU's {@code [gate; up]} split over tensor-parallel
 * ranks, {@link Parameter.Partition#stride()} above 1) is one region per stride chunk.
 *
 * <p>Local coordinates refer to {@code localShape}, which has the parameter's number of elements
 * but may reshape it (e.g. a leading stacking dim of 1): the optimizer addresses the parameter
 * through its row-major flattening.
 *
 * @param key layout-independent name of the global tensor, e.g. {@code "decoder.layers.3.mlp.linear_fc1.weight"}
 * @param localShape shape of the local tensor the regions refer to
 * @param globalShape shape of the whole tensor
 * @param regions rectangles of the local tensor that tile it, each placed in the global tensor
 * @param replicaId 0 if this rank writes the parameter's state, else non-zero (held whole elsewhere too)
 */
public record ParameterPlacement(String key, long[] localShape, long[] globalShape, List<Region> regions,
                                 int replicaId) {

    /**
     * Validates that every region lies inside both tensors and that the regions tile the local tensor.
     *
     * @throws IllegalArgumentException naming the key and the offending region
     */
    public ParameterPlacement {
        if (key == null || localShape == null || globalShape == null || regions == null) {
            throw new IllegalArgumentException("key, shapes and regions must not be null");
        }
        localShape = localShape.clone();
        globalShape = globalShape.clone();
        regions = List.copyOf(regions);
        if (localShape.length != globalShape.length) {
            throw new IllegalArgumentException(key + ": local shape " + Arrays.toString(localShape)
                    + " and global shape " + Arrays.toString(globalShape) + " must have the same number of dims");
        }
        if (replicaId < 0) {
            throw new IllegalArgumentException(key + ": replica id " + replicaId + " is negative");
        }
        long covered = 0;
        for (int i = 0; i < regions.size(); i++) {
            Region r = regions.get(i);
            if (r.extent().length != localShape.length) {
                throw new IllegalArgumentException(key + ": region " + r + " does not have " + localShape.length + " dims");
            }
            for (int d = 0; d < localShape.length; d++) {
                if (r.localOffset()[d] + r.extent()[d] > localShape[d] || r.globalOffset()[d] + r.extent()[d] > globalShape[d]) {
                    throw new IllegalArgumentException(key + ": region " + r + " leaves the local shape "
                            + Arrays.toString(localShape) + " or the global shape " + Arrays.toString(globalShape)
                            + " along dim " + d);
                }
            }
            for (int j = 0; j < i; j++) {
                if (regions.get(j).within(r.localOffset(), r.extent()).isPresent()) {
                    throw new IllegalArgumentException(key + ": regions " + regions.get(j) + " and " + r + " overlap");
                }
            }
            covered += r.numel();
        }
        long numel = numel(localShape);
        if (covered != numel) {
            throw new IllegalArgumentException(key + ": the regions cover " + covered + " of the " + numel
                    + " local elements");
        }
    }

    /**
     * A rectangle of the local tensor and where it sits in the global one.
     *
     * @param localOffset where the rectangle starts in the local tensor, along each dim
     * @param extent the rectangle's shape
     * @param globalOffset where it starts in the global tensor, along each dim
     */
    public record Region(long[] localOffset, long[] extent, long[] globalOffset) {
        /**
         * Validates the dims.
         *
         * @throws IllegalArgumentException if the arrays differ in length or hold a negative value
         */
        public Region {
            localOffset = localOffset.clone();
            extent = extent.clone();
            globalOffset = globalOffset.clone();
            if (localOffset.length != extent.length || globalOffset.length != extent.length) {
                throw new IllegalArgumentException("region " + Arrays.toString(localOffset) + " + "
                        + Arrays.toString(extent) + " -> " + Arrays.toString(globalOffset) + " mixes numbers of dims");
            }
            for (int d = 0; d < extent.length; d++) {
                if (localOffset[d] < 0 || extent[d] < 0 || globalOffset[d] < 0) {
                    throw new IllegalArgumentException("region " + Arrays.toString(localOffset) + " + "
                            + Arrays.toString(extent) + " -> " + Arrays.toString(globalOffset) + " is negative along dim " + d);
                }
            }
        }

        /** @return number of elements */
        public long numel() {
            return ParameterPlacement.numel(extent);
        }

        /**
         * The part of the local rectangle {@code [offset, offset + extent)} that lies in this region,
         * placed in the global tensor like the rest of the region.
         *
         * @param offset where the rectangle starts in the local tensor
         * @param size the rectangle's shape
         * @return the common part, or empty when it holds no element
         * @throws IllegalArgumentException if the rectangle has another number of dims
         */
        public Optional<Region> within(long[] offset, long[] size) {
            if (offset.length != extent.length || size.length != extent.length) {
                throw new IllegalArgumentException("a rectangle of " + offset.length + " dims cannot meet region " + this);
            }
            long[] lo = new long[extent.length];
            long[] e = new long[extent.length];
            long[] global = new long[extent.length];
            for (int d = 0; d < extent.length; d++) {
                lo[d] = Math.max(offset[d], localOffset[d]);
                long hi = Math.min(offset[d] + size[d], localOffset[d] + extent[d]);
                if (hi <= lo[d]) {
                    return Optional.empty();
                }
                e[d] = hi - lo[d];
                global[d] = globalOffset[d] + lo[d] - localOffset[d];
            }
            return Optional.of(new Region(lo, e, global));
        }

        @Override
        public String toString() {
            return "local " + Arrays.toString(localOffset) + " + " + Arrays.toString(extent) + " -> global "
                    + Arrays.toString(globalOffset);
        }
    }

    /**
     * A placement of one rectangle: the checkpoint description of a contiguous part.
     *
     * @param description the part's key, global shape and offset; its data gives the local shape
     * @return the placement, with the description's replica id
     */
    public static ParameterPlacement of(ShardedTensor description) {
        long[] local = description.data().getShape().getShape().clone(); // DJL returns its internal array
        return new ParameterPlacement(description.key(), local, description.globalShape(),
                List.of(new Region(new long[local.length], local, description.globalOffset())), description.replicaId());
    }

    /**
     * The placement of a parameter as its {@link Parameter.Partition} says: one region per
     * {@link Parameter.Partition#runs run} along the split dim (one for a contiguous part, one per
     * stride chunk for a strided one), in the parameter's own shape, main replica.
     *
     * @param key the global tensor's key
     * @param param the parameter
     * @return the placement
     * @throws IllegalArgumentException if the stride does not divide the parameter's split dim
     */
    public static ParameterPlacement of(String key, Parameter param) {
        long[] local = param.data().getShape().getShape().clone(); // DJL returns its internal array
        Parameter.Partition partition = param.partition();
        List<Region> regions = new ArrayList<>(partition.stride());
        if (!partition.isSplit()) {
            regions.add(new Region(new long[local.length], local, new long[local.length]));
        } else {
            int dim = partition.dim();
            for (Parameter.Run run : partition.runs(local[dim])) {
                long[] localOffset = new long[local.length];
                long[] extent = local.clone();
                long[] globalOffset = new long[local.length];
                localOffset[dim] = run.localStart();
                extent[dim] = run.length();
                globalOffset[dim] = run.globalStart();
                regions.add(new Region(localOffset, extent, globalOffset));
            }
        }
        return new ParameterPlacement(key, local, param.globalShape(), regions, 0);
    }

    /** @return number of local elements */
    public long numel() {
        return numel(localShape);
    }

    private static long numel(long[] shape) {
        long n = 1;
        for (long s : shape) {
            n *= s;
        }
        return n;
    }

    @Override
    public String toString() {
        return "ParameterPlacement{" + key + ", local " + Arrays.toString(localShape) + ", global "
                + Arrays.toString(globalShape) + ", regions " + regions + ", replica " + replicaId + "}";
    }
}
