package io.mcore4j.tensorparallel;

import io.mcore4j.core.autograd.NoGrad;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.random.SeedScheme;

/** Ready-made {@link Initializer}s. All are deterministic and thread-safe (they hold no generator). */
public final class Initializers {
    /** Region name under which {@link #normalPerRank} derives each shard's seed. */
    public static final String PER_RANK_REGION = "tensor-parallel-init";

    /** Base seed of the layers' default initializers: Megatron-LM's {@code --seed} default. */
    public static final long DEFAULT_SEED = 1234;

    /** Standard deviation of the layers' default initializers: Megatron-Core's {@code init_method_std}. */
    public static final double DEFAULT_STD = 0.02;

    private Initializers() {}

    /**
     * Normal samples as {@link #normal}, with the seed derived from a parameter's key and a base seed
     * ({@link SeedScheme} region {@code "init/" + key}, the convention the models use too). Every
     * parameter with its own key gets its own weights, the same ones at every tensor-parallel size
     * (shards are slices of the one full weight), and the same ones in every run with the same base
     * seed. This is what the parallel layers use when no initializer is given, keyed by the layer's
     * name: {@code name + ".weight"}.
     *
     * @param key the parameter's key, e.g. {@code decoder.layers.0.mlp.linear_fc1.weight}
     * @param std the standard deviation, at least 0
     * @param baseSeed the run's seed
     * @return the initializer
     */
    public static Initializer normalForKey(String key, double std, long baseSeed) {
        java.util.Objects.requireNonNull(key, "key");
        return normal(std, new SeedScheme(baseSeed).seed("init/" + key));
    }

    /**
     * Normal samples with mean 0 drawn on the Java side by {@code new DeterministicRandom(seed)},
     * in row-major order over the full shape; shards are slices of that full weight.
     *
     * @param std the standard deviation, at least 0
     * @param seed the generator's seed
     * @return the initializer
     */
    public static Initializer normal(double std, long seed) {
        checkStd(std);
        return (manager, shape, dtype) -> new DeterministicRandom(seed).normal(manager, shape, 0, std, dtype);
    }

    /**
     * Zeros (Megatron-Core's bias initialisation).
     *
     * @return the initializer
     */
    public static Initializer zeros() {
        return (manager, shape, dtype) -> DataTypes.zeros(manager, shape, dtype);
    }

    /**
     * A constant (tests, norm weights).
     *
     * @param value the value of every element
     * @return the initializer
     */
    public static Initializer constant(double value) {
        return (manager, shape, dtype) -> DataTypes.full(manager, shape, value, dtype, manager.getDevice());
    }

    /**
     * Device-side normal samples for models whose full weights should never be built: each rank
     * draws only its own shard, on the manager's device, from a seed derived from {@code seed}, the
     * number of parts and the rank's part index ({@link SeedScheme} region {@value #PER_RANK_REGION}).
     * Shards therefore differ from slices of any single full weight, and a model initialised this
     * way at one tensor-parallel size differs from the same model at another. Samples come from a
     * Box-Muller transform of {@link DeterministicRandom#uniform} draws computed in float64
     * (so identical on CPU and GPU up to the transcendental functions' rounding).
     *
     * @param std the standard deviation, at least 0
     * @param seed the base seed of this weight (derive one per layer)
     * @return the initializer
     */
    public static Initializer normalPerRank(double std, long seed) {
        checkStd(std);
        return new Initializer() {
            @Override
            public NDArray create(NDManager manager, Shape fullShape, DataType dtype) {
                return createShard(manager, fullShape, dtype, StridedPartition.whole());
            }

            @Override
            public NDArray createShard(NDManager manager, Shape fullShape, DataType dtype, StridedPartition partition) {
                Shape local = partition.count() == 1 ? fullShape : partition.localShape(fullShape);
                DeterministicRandom random = new SeedScheme(seed).generator(PER_RANK_REGION,
                        partition.count(), partition.index());
                return deviceNormal(manager, random, local, std, dtype);
            }
        };
    }

    /**
     * PyTorch's {@code nn.Linear} default and PEFT's LoRA A: {@code kaiming_uniform_(a=sqrt(5))},
     * i.e. uniform in {@code [-1/sqrt(fan_in), 1/sqrt(fan_in))} with {@code fan_in} the full weight's
     * last dim, drawn by {@link DeterministicRandom#uniform} over the full shape (same values on CPU
     * and GPU; shards are slices of the full weight).
     *
     * @param seed the generator's seed
     * @return the initializer
     */
    public static Initializer kaimingUniform(long seed) {
        return (manager, shape, dtype) -> {
            double bound = 1 / Math.sqrt(shape.get(shape.dimension() - 1));
            try (NoGrad ignored = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
                NDArray u = new DeterministicRandom(seed).uniform(temp, shape, DataType.FLOAT64);
                NDArray samples = DataTypes.toType(u.mul(2 * bound).sub(bound), dtype, true);
                samples.attach(manager);
                return samples;
            }
        };
    }

    private static NDArray deviceNormal(NDManager manager, DeterministicRandom random, Shape shape, double std,
                                        DataType dtype) {
        try (NoGrad ignored = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
            NDArray u1 = random.uniform(temp, shape, DataType.FLOAT64);
            NDArray u2 = random.uniform(temp, shape, DataType.FLOAT64);
            // 1 - u1 lies in (0, 1], so the logarithm is finite
            NDArray radius = u1.neg().add(1.0).log().mul(-2.0).sqrt();
            NDArray samples = DataTypes.toType(radius.mul(u2.mul(2 * Math.PI).cos()).mul(std), dtype, true);
            samples.attach(manager);
            return samples;
        }
    }

    private static void checkStd(double std) {
        if (!(std >= 0) || Double.isInfinite(std)) {
            throw new IllegalArgumentException("standard deviation must be finite and >= 0, got " + std);
        }
    }
}
