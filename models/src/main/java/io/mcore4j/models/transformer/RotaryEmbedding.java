package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;

/**
 * Rotary position embeddings (RoFormer) in the "rotate half" layout Megatron-Core uses by default:
 * the first {@code rotaryDims} channels of each head are split in two halves {@code (x1, x2)} and
 * become {@code x * cos + (-x2, x1) * sin} with frequencies {@code base^(-2i / rotaryDims)}; the
 * remaining channels pass through.
 */
public final class RotaryEmbedding {
    private final int rotaryDims;
    private final double base;

    /**
     * @param headDim channels per head
     * @param percent fraction of them that rotate
     * @param base the frequency base (theta)
     */
    public RotaryEmbedding(int headDim, double percent, double base) {
        this.rotaryDims = (int) Math.round(headDim * percent);
        this.base = base;
    }

    /**
     * Rotates queries and keys [s, b, n, d] by the positions 0..s-1; the cos/sin tables are built
     * once for both.
     *
     * @param manager owner of temporaries
     * @param query queries
     * @param key keys, same sequence length and dtype
     * @return the rotated query and key, same shapes and dtype
     */
    public NDArray[] apply(NDManager manager, NDArray query, NDArray key) {
        long s = query.getShape().get(0);
        DataType dtype = DataTypes.of(query);
        int half = rotaryDims / 2;
        // number operands as device scalars: a Java number is a synchronising host copy on a GPU
        NDArray steps = manager.arange(0, half, 1, DataType.FLOAT64);
        NDArray inv = steps.mul(Tensors.scalar(-2.0 / rotaryDims, steps, manager))
                .mul(Tensors.scalar(Math.log(base), steps, manager)).exp();
        NDArray angles = manager.arange(0, (int) s, 1, DataType.FLOAT64).reshape(s, 1).mul(inv.reshape(1, half));
        NDArray emb = NDArrays.concat(new NDList(angles, angles), 1).reshape(s, 1, 1, rotaryDims);
        NDArray cos = DataTypes.toType(emb.cos(), dtype, false);
        NDArray sin = DataTypes.toType(emb.sin(), dtype, false);
        return new NDArray[] {rotate(query, cos, sin), rotate(key, cos, sin)};
    }

    private NDArray rotate(NDArray x, NDArray cos, NDArray sin) {
        int half = rotaryDims / 2;
        long d = x.getShape().get(3);
        NDArray rot = rotaryDims == d ? x : x.get(new NDIndex("..., :{}", rotaryDims));
        NDArray x1 = rot.get(new NDIndex("..., :{}", half));
        NDArray x2 = rot.get(new NDIndex("..., {}:", half));
        NDArray rotated = rot.mul(cos).add(NDArrays.concat(new NDList(x2.neg(), x1), -1).mul(sin));
        if (rotaryDims == d) {
            return rotated;
        }
        return NDArrays.concat(new NDList(rotated, x.get(new NDIndex("..., {}:", rotaryDims))), -1);
    }
}
