package io.mcore4j.core.random;

import io.mcore4j.core.autograd.NoGrad;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;

/**
 * A seeded generator with a fully specified algorithm: SplitMix64 for Java-side streams, and a
 * counter-based hash for device-side uniforms.
 *
 * <p>Java-side draws ({@link #normal}) are meant for initialisation, where building the whole
 * master weight and keeping a slice makes every tensor-parallel shard equal the serial weight bit
 * for bit. Device-side draws ({@link #uniform}) never leave the tensor's device: each call derives
 * a fresh key from the generator's counter, so {@link #state()} / {@link #restore(long)} replay the
 * exact same masks (activation recompute). Not thread-safe: one generator per rank and region.
 */
public final class DeterministicRandom {
    /** 2^31 - 1, a prime: integer hash rounds stay below 2^62 and never overflow int64. */
    private static final long MODULUS = 2147483647L;

    private final long seed;
    private long counter;

    /**
     * Creates a generator.
     *
     * @param seed the 64-bit seed, e.g. from {@link SeedScheme#seed}
     */
    public DeterministicRandom(long seed) {
        this.seed = seed;
    }

    /** @return the generator's position, to hand to {@link #restore(long)} for a replay */
    public long state() {
        return counter;
    }

    /**
     * Rewinds or advances the generator to a position returned by {@link #state()}.
     *
     * @param state the position
     */
    public void restore(long state) {
        this.counter = state;
    }

    /** @return the next 64 uniformly distributed bits of the Java-side stream */
    public long nextLong() {
        return SplitMix64.mix(seed + 0x9E3779B97F4A7C15L * ++counter);
    }

    /** @return a uniform double in [0, 1) with 53 random bits */
    public double nextDouble() {
        return (nextLong() >>> 11) * 0x1.0p-53;
    }

    /**
     * Fills a float array with normal samples (Box-Muller on {@link #nextDouble()}).
     *
     * @param count number of samples
     * @param mean the mean
     * @param std the standard deviation
     * @return the samples
     */
    public float[] normal(int count, double mean, double std) {
        float[] out = new float[count];
        for (int i = 0; i < count; i += 2) {
            double u1 = 1.0 - nextDouble(); // (0, 1]
            double u2 = nextDouble();
            double r = Math.sqrt(-2.0 * Math.log(u1));
            out[i] = (float) (mean + std * r * Math.cos(2 * Math.PI * u2));
            if (i + 1 < count) {
                out[i + 1] = (float) (mean + std * r * Math.sin(2 * Math.PI * u2));
            }
        }
        return out;
    }

    /**
     * A tensor of normal samples drawn on the Java side.
     *
     * @param manager owner of the result
     * @param shape its shape
     * @param mean the mean
     * @param std the standard deviation
     * @param dtype the result's dtype (samples are drawn in float32 and converted)
     * @return the new tensor
     */
    public NDArray normal(NDManager manager, Shape shape, double mean, double std, DataType dtype) {
        long n = shape.size();
        if (n > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("Java-side initialisation of " + n + " elements is too large;"
                    + " use device-side initialisation");
        }
        NDArray out = manager.create(normal((int) n, mean, std), shape);
        if (dtype != DataType.FLOAT32) {
            NDArray cast = DataTypes.toType(out, dtype, false);
            out.close();
            return cast;
        }
        return out;
    }

    /**
     * Uniform samples in [0, 1) computed on {@code manager}'s device from the element index and a
     * per-call key: a counter-based hash of three multiply-add and squaring rounds modulo 2^31 - 1
     * in int64 arithmetic, so CPU and GPU give identical values.
     *
     * @param manager owner and device of the result
     * @param shape the shape
     * @param dtype a floating dtype for the result
     * @return the samples
     */
    public NDArray uniform(NDManager manager, Shape shape, DataType dtype) {
        long key = nextLong();
        try (NDManager temp = manager.newSubManager(); NoGrad ignored = NoGrad.enter()) {
            // every number operand is a device scalar: a Java number is a synchronising host copy on a GPU
            NDArray x = temp.arange(0, shape.size(), 1, DataType.INT64);
            NDArray modulus = Tensors.scalar(MODULUS, x, temp);
            x = x.mod(modulus);
            for (int round = 0; round < 3; round++) {
                long a = 1 + Long.remainderUnsigned(SplitMix64.mix(key + 3L * round), MODULUS - 1);
                long c = Long.remainderUnsigned(SplitMix64.mix(key + 3L * round + 1), MODULUS);
                long d = Long.remainderUnsigned(SplitMix64.mix(key + 3L * round + 2), MODULUS);
                x = x.mul(Tensors.scalar(a, x, temp)).add(Tensors.scalar(c, x, temp)).mod(modulus);
                x = x.mul(x).add(Tensors.scalar(d, x, temp)).mod(modulus);
            }
            NDArray x64 = x.toType(DataType.FLOAT64, false);
            NDArray u = DataTypes.toType(x64.div(Tensors.scalar(MODULUS, x64, temp)), dtype, false).reshape(shape);
            u.attach(manager);
            return u;
        }
    }

    /**
     * A keep-mask for dropout: 1 where the element is kept (probability {@code 1 - dropProbability}).
     *
     * @param manager owner and device of the result
     * @param shape the shape
     * @param dropProbability probability of dropping an element, in [0, 1)
     * @param dtype dtype of the mask
     * @return the mask
     */
    public NDArray keepMask(NDManager manager, Shape shape, double dropProbability, DataType dtype) {
        if (!(dropProbability >= 0 && dropProbability < 1)) {
            throw new IllegalArgumentException("dropout probability " + dropProbability + " is outside [0, 1)");
        }
        try (NDManager temp = manager.newSubManager()) {
            NDArray u = uniform(temp, shape, DataType.FLOAT32);
            NDArray mask = DataTypes.toType(u.gte(Tensors.scalar(dropProbability, u, temp)), dtype, false);
            mask.attach(manager);
            return mask;
        }
    }
}
