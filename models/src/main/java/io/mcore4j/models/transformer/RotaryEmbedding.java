package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.models.TransformerConfig;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * Rotary position embeddings (RoFormer) in the "rotate half" layout Megatron-Core uses by default:
 * the first {@code rotaryDims} channels of each head are split in two halves {@code (x1, x2)} and
 * become {@code x * cos + (-x2, x1) * sin} with frequencies {@code base^(-2i / rotaryDims)}; the
 * remaining channels pass through. With LLaMA 3.1, linear or YaRN scaling the inverse frequencies are rescaled by
 * {@link TransformerConfig.RopeScaling}'s rule, and YaRN multiplies cos and sin by its
 * {@link TransformerConfig.RopeScaling#attentionFactor()}.
 *
 * <p>Made with a table owner, an instance rotates queries and keys whose channels all rotate
 * through mcore4j's TorchScript module ({@code scripts/make_rotary_module.py}): one call for both,
 * which CUDA runs as fused kernels over the projection's strided views (the elementary ops
 * broadcast the tables in unvectorised kernels and concatenate strided halves: ~0.3 ms of a LLaMA-7B
 * layer's forward on an H200). In a training pass ({@link #apply(AutogradScope, NDArray, NDArray,
 * long[], NDArray...)}) the rotation is a {@link Function} whose backward is the inverse rotation, the same
 * module with {@code -sin}: libtorch's differentiation of the module took ~0.45 ms per layer on
 * that GPU, with gradients for the constant tables and zero-filled slices. It also keeps the
 * tables of positions {@code 0..s-1} between passes, in that owner. Without a table owner, or with partial
 * rotation, the same function is composed from DJL's ops.
 */
public final class RotaryEmbedding {
    /** The rotation module's resource, written by {@code scripts/make_rotary_module.py}. */
    public static final String RESOURCE = "/io/mcore4j/models/torchscript/rotary.pt";

    private final int rotaryDims;
    private final double base;
    private final double[] scaledInverseFrequencies;
    /** The factor on cos and sin (YaRN's attention factor), 1 for none. */
    private final double attentionFactor;
    private final TorchScriptModule module;
    private final NDManager tableOwner;
    /** cos, sin and -sin of positions 0..s-1 per (s, dtype) training passes asked for. */
    private final Map<String, NDArray[]> tablesByLength = new HashMap<>();

    /**
     * @param headDim channels per head
     * @param percent fraction of them that rotate
     * @param base the frequency base (theta)
     */
    public RotaryEmbedding(int headDim, double percent, double base) {
        this(headDim, percent, base, null);
    }

    /**
     * @param headDim channels per head
     * @param percent fraction of them that rotate
     * @param base the frequency base (theta)
     * @param scaling frequency scaling, or null for none
     */
    public RotaryEmbedding(int headDim, double percent, double base, TransformerConfig.RopeScaling scaling) {
        this(headDim, percent, base, scaling, null);
    }

    /**
     * @param headDim channels per head
     * @param percent fraction of them that rotate
     * @param base the frequency base (theta)
     * @param scaling frequency scaling, or null for none
     * @param tableOwner owner of the tables the rotation module reads (the module is the process's one instance,
     *     {@link TorchScriptModules#shared}, compiled once for every layer; see the class comment); null to compose
     *     the rotation from elementary ops
     */
    public RotaryEmbedding(int headDim, double percent, double base, TransformerConfig.RopeScaling scaling,
                           NDManager tableOwner) {
        this.rotaryDims = (int) Math.round(headDim * percent);
        this.base = base;
        this.scaledInverseFrequencies = scaling == null ? null : scaledInverseFrequencies(rotaryDims, base, scaling);
        this.attentionFactor = scaling == null ? 1 : scaling.attentionFactor();
        this.module = tableOwner == null || rotaryDims != headDim ? null
                : TorchScriptModules.shared(RotaryEmbedding.class, RESOURCE);
        this.tableOwner = module == null ? null : tableOwner;
    }

    /** LLaMA 3.1's, the linear or YaRN's rule (see {@link TransformerConfig.RopeScaling}), computed once in double precision. */
    static double[] scaledInverseFrequencies(int rotaryDims, double base, TransformerConfig.RopeScaling s) {
        int half = rotaryDims / 2;
        if (s.type() == TransformerConfig.RopeScaling.Type.YARN) {
            return yarnInverseFrequencies(rotaryDims, base, s);
        }
        double lowFreqWavelength = s.originalMaxPositions() / s.lowFreqFactor();
        double highFreqWavelength = s.originalMaxPositions() / s.highFreqFactor();
        double[] out = new double[half];
        for (int i = 0; i < half; i++) {
            double f = Math.exp(-2.0 * i / rotaryDims * Math.log(base));
            double wavelength = 2 * Math.PI / f;
            if (s.type() == TransformerConfig.RopeScaling.Type.LINEAR) {
                out[i] = f / s.factor();
            } else if (wavelength > lowFreqWavelength) {
                out[i] = f / s.factor();
            } else if (wavelength < highFreqWavelength) {
                out[i] = f;
            } else {
                double smooth = (s.originalMaxPositions() / wavelength - s.lowFreqFactor())
                        / (s.highFreqFactor() - s.lowFreqFactor());
                out[i] = (1 - smooth) * f / s.factor() + smooth * f;
            }
        }
        return out;
    }

    /**
     * YaRN's frequencies (Megatron-Core's {@code YarnRotaryEmbedding}, transformers' {@code yarn}): the channel pairs
     * below {@code low} keep their frequency, those above {@code high} are divided by the factor, those between ramp
     * linearly, where {@code low} and {@code high} are the pairs (floored and ceiled) that turn {@code betaFast} and
     * {@code betaSlow} times over the original context.
     */
    private static double[] yarnInverseFrequencies(int rotaryDims, double base, TransformerConfig.RopeScaling s) {
        int half = rotaryDims / 2;
        double low = Math.max(Math.floor(correctionDim(s.betaFast(), rotaryDims, base, s.originalMaxPositions())), 0);
        double high = Math.min(Math.ceil(correctionDim(s.betaSlow(), rotaryDims, base, s.originalMaxPositions())),
                rotaryDims - 1);
        if (low == high) {
            high += 0.001; // as both references: no division by zero
        }
        double[] out = new double[half];
        for (int i = 0; i < half; i++) {
            double f = Math.exp(-2.0 * i / rotaryDims * Math.log(base));
            double ramp = Math.min(Math.max((i - low) / (high - low), 0), 1);
            out[i] = f / s.factor() * ramp + f * (1 - ramp);
        }
        return out;
    }

    /** The (fractional) channel whose frequency turns {@code rotations} times over {@code positions} positions. */
    private static double correctionDim(double rotations, int rotaryDims, double base, int positions) {
        return rotaryDims * Math.log(positions / (rotations * 2 * Math.PI)) / (2 * Math.log(base));
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
        return apply(manager, query, key, null);
    }

    /**
     * Rotates queries and keys [s, b, n, d] by the given global positions of their tokens (a
     * context-parallel rank holds two separate chunks of the sequence).
     *
     * @param manager owner of temporaries
     * @param query queries
     * @param key keys, same sequence length and dtype
     * @param positions the {@code s} positions of the tokens, or null for 0..s-1
     * @return the rotated query and key, same shapes and dtype
     * @throws IllegalArgumentException if {@code positions} does not have {@code s} entries
     */
    public NDArray[] apply(NDManager manager, NDArray query, NDArray key, long[] positions) {
        long s = query.getShape().get(0);
        if (positions != null && positions.length != s) {
            throw new IllegalArgumentException(positions.length + " positions for a sequence of " + s + " tokens");
        }
        NDArray at = positions == null ? manager.arange(0, (int) s, 1, DataType.FLOAT64)
                : manager.create(positions).toType(DataType.FLOAT64, false);
        return rotateBoth(manager, query, key, at);
    }

    /**
     * Rotates queries and keys [s, b, n, d] of a pass by the given global positions of their tokens
     * (see {@link #apply(NDManager, NDArray, NDArray, long[])}), recording the rotation in
     * {@code scope}: with the module (see the class comment), one {@link Function} whose backward is
     * the inverse rotation.
     *
     * <p>{@code alongside} are tensors that leave the same producer as the queries and keys (the
     * values of the fused QKV projection): they are returned unchanged, as outputs of the same
     * Function, so that a backward pass reaches the producer from all of them in one traversal
     * (otherwise the projection's backward would run once for the values and again for the
     * rotated tensors).
     *
     * @param scope the pass's scope; owns the results
     * @param query queries
     * @param key keys, same sequence length and dtype
     * @param positions the {@code s} positions of the tokens, or null for 0..s-1
     * @param alongside tensors to pass through beside them
     * @return the rotated query and key, then {@code alongside}'s tensors, same shapes and dtypes
     * @throws IllegalArgumentException if {@code positions} does not have {@code s} entries
     */
    public NDArray[] apply(AutogradScope scope, NDArray query, NDArray key, long[] positions, NDArray... alongside) {
        if (module == null) {
            NDArray[] rotated = apply(scope.manager(), query, key, positions);
            NDArray[] out = Arrays.copyOf(rotated, 2 + alongside.length);
            System.arraycopy(alongside, 0, out, 2, alongside.length);
            return out;
        }
        long s = query.getShape().get(0);
        NDArray[] tables;
        if (positions == null) {
            tables = keptTables(s, DataTypes.of(query));
        } else {
            if (positions.length != s) {
                throw new IllegalArgumentException(positions.length + " positions for a sequence of " + s + " tokens");
            }
            NDManager m = scope.manager();
            NDArray[] made = cosSin(m, m.create(positions).toType(DataType.FLOAT64, false), s, DataTypes.of(query));
            tables = new NDArray[] {made[0], made[1], made[1].neg()};
        }
        NDArray[] inputs = new NDArray[2 + alongside.length];
        inputs[0] = query;
        inputs[1] = key;
        System.arraycopy(alongside, 0, inputs, 2, alongside.length);
        return scope.apply(new Rotation(module, tables, positions == null), inputs);
    }

    /**
     * Rotates queries and keys [s, b, n, d] of a pass by per-token position ids (packed sequences, whose
     * positions restart at each sequence's start, differ from column to column), recording the rotation
     * in {@code scope} as {@link #apply(AutogradScope, NDArray, NDArray, long[], NDArray...)} does.
     *
     * @param scope the pass's scope; owns the results
     * @param query queries
     * @param key keys, same sequence length and dtype
     * @param positionIds int64 [s, b] positions of the tokens
     * @param alongside tensors to pass through beside them
     * @return the rotated query and key, then {@code alongside}'s tensors, same shapes and dtypes
     * @throws IllegalArgumentException if {@code positionIds} is not [s, b]
     */
    public NDArray[] applyPositionIds(AutogradScope scope, NDArray query, NDArray key, NDArray positionIds,
                                      NDArray... alongside) {
        long s = query.getShape().get(0);
        long b = query.getShape().get(1);
        if (!positionIds.getShape().equals(new Shape(s, b))) {
            throw new IllegalArgumentException("position ids of shape " + positionIds.getShape() + " for queries of shape "
                    + query.getShape() + " (they are [s, b])");
        }
        NDManager m = scope.manager();
        NDArray at = Tensors.own(positionIds.toType(DataType.FLOAT64, false), m);
        NDArray[] made = cosSin(m, at, new Shape(s, b, 1, rotaryDims), DataTypes.of(query));
        NDArray[] out = new NDArray[2 + alongside.length];
        System.arraycopy(alongside, 0, out, 2, alongside.length);
        if (module == null) {
            out[0] = rotate(query, made[0], made[1]);
            out[1] = rotate(key, made[0], made[1]);
            return out;
        }
        NDArray[] inputs = out.clone();
        inputs[0] = query;
        inputs[1] = key;
        return scope.apply(new Rotation(module, new NDArray[] {made[0], made[1], made[1].neg()}, false), inputs);
    }

    /**
     * The kept tables of positions 0..s-1 in {@code dtype}, made on first use (a pass in flight may
     * still hold the tables of another length, so none is dropped before the instance's owner closes).
     */
    private NDArray[] keptTables(long s, DataType dtype) {
        return tablesByLength.computeIfAbsent(s + "/" + dtype, key -> {
            try (NDManager temp = tableOwner.newSubManager()) {
                NDArray[] made = cosSin(temp, temp.arange(0, (int) s, 1, DataType.FLOAT64), s, dtype);
                NDArray[] tables = {made[0], made[1], made[1].neg()};
                for (NDArray t : tables) {
                    t.attach(tableOwner);
                }
                return tables;
            }
        });
    }

    /**
     * The rotation of a training pass: forward rotates by the tables, backward rotates the
     * gradients back (the inverse rotation is the rotation by {@code -sin}, the "rotate half"
     * tables having equal halves).
     */
    private static final class Rotation implements Function {
        private final TorchScriptModule module;
        private final NDArray cos;
        private final NDArray sin;
        private final NDArray negativeSin;
        private final boolean kept;

        /** @param tables cos, sin and -sin; @param kept whether they are the instance's kept tables (else a pass's) */
        Rotation(TorchScriptModule module, NDArray[] tables, boolean kept) {
            this.module = module;
            this.cos = tables[0];
            this.sin = tables[1];
            this.negativeSin = tables[2];
            this.kept = kept;
        }

        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            NDList out = module.forward(new NDList(inputs[0], inputs[1], cos, sin));
            if (!kept) {
                // a pass's tables may belong to a frame: backward needs them until the scope closes
                cos.attach(ctx.manager());
                negativeSin.attach(ctx.manager());
            }
            NDArray[] outputs = inputs.clone(); // the tensors passed through, as they are
            outputs[0] = Tensors.own(out.get(0), ctx.manager());
            outputs[1] = Tensors.own(out.get(1), ctx.manager());
            return outputs;
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            NDList out = module.forward(new NDList(grads[0], grads[1], cos, negativeSin));
            NDArray[] inputGrads = grads.clone(); // the passed-through tensors' gradients, as they came
            inputGrads[0] = Tensors.own(out.get(0), ctx.manager());
            inputGrads[1] = Tensors.own(out.get(1), ctx.manager());
            return inputGrads;
        }

        @Override
        public String name() {
            return "rotary-embedding";
        }
    }

    /**
     * Rotates queries and keys [s, b, n, d] by the positions {@code offset..offset+s-1}: the tokens of a
     * generation step that continue a cached sequence. The positions are made on the device (no host copy).
     *
     * @param manager owner of temporaries
     * @param query queries
     * @param key keys, same sequence length and dtype
     * @param offset position of the first token
     * @return the rotated query and key, same shapes and dtype
     */
    public NDArray[] apply(NDManager manager, NDArray query, NDArray key, long offset) {
        long s = query.getShape().get(0);
        return rotateBoth(manager, query, key, manager.arange((int) offset, (int) (offset + s), 1, DataType.FLOAT64));
    }

    /**
     * The cos and sin factors of positions {@code 0..positions-1}, [positions, rotaryDims] in {@code dtype}:
     * row {@code p} is what {@link #apply} multiplies a token at position {@code p} by. A generator computes
     * them once and indexes them by position instead of rebuilding them in every layer and step.
     *
     * @param manager owner of the tables and temporaries
     * @param positions number of positions
     * @param dtype the dtype of the queries and keys they will rotate
     * @return {cos, sin}
     */
    public NDArray[] tables(NDManager manager, int positions, DataType dtype) {
        NDArray[] cosSin = cosSin(manager, manager.arange(0, positions, 1, DataType.FLOAT64), positions, dtype);
        return new NDArray[] {cosSin[0].reshape(positions, rotaryDims), cosSin[1].reshape(positions, rotaryDims)};
    }

    /** @return the number of leading channels of each head that rotate */
    public int rotaryDims() {
        return rotaryDims;
    }

    /** Rotates both by the positions {@code at} [s] (float64). */
    private NDArray[] rotateBoth(NDManager manager, NDArray query, NDArray key, NDArray at) {
        NDArray[] tables = cosSin(manager, at, query.getShape().get(0), DataTypes.of(query));
        NDArray cos = tables[0];
        NDArray sin = tables[1];
        if (module != null) {
            NDList rotated = module.forward(new NDList(query, key, cos, sin));
            return new NDArray[] {Tensors.own(rotated.get(0), manager), Tensors.own(rotated.get(1), manager)};
        }
        return new NDArray[] {rotate(query, cos, sin), rotate(key, cos, sin)};
    }

    /** cos and sin [s, 1, 1, rotaryDims] in {@code dtype} of the positions {@code at} [s] (float64), owned by {@code manager}. */
    private NDArray[] cosSin(NDManager manager, NDArray at, long s, DataType dtype) {
        return cosSin(manager, at, new Shape(s, 1, 1, rotaryDims), dtype);
    }

    /**
     * cos and sin of the positions {@code at} (float64, any shape) in {@code dtype}, laid out as {@code table}
     * (the positions' shape, then {@code rotaryDims}), owned by {@code manager}.
     */
    private NDArray[] cosSin(NDManager manager, NDArray at, Shape table, DataType dtype) {
        int half = rotaryDims / 2;
        // number operands as device scalars: a Java number is a synchronising host copy on a GPU
        NDArray inv;
        if (scaledInverseFrequencies != null) {
            inv = manager.create(scaledInverseFrequencies);
        } else {
            NDArray steps = manager.arange(0, half, 1, DataType.FLOAT64);
            inv = steps.mul(Tensors.scalar(-2.0 / rotaryDims, steps, manager))
                    .mul(Tensors.scalar(Math.log(base), steps, manager)).exp();
        }
        NDArray angles = at.reshape(at.size(), 1).mul(inv.reshape(1, half));
        NDArray emb = NDArrays.concat(new NDList(angles, angles), 1).reshape(table);
        NDArray cos = emb.cos();
        NDArray sin = emb.sin();
        if (attentionFactor != 1) {
            cos = cos.mul(Tensors.scalar(attentionFactor, cos, manager));
            sin = sin.mul(Tensors.scalar(attentionFactor, sin, manager));
        }
        return new NDArray[] {DataTypes.toType(cos, dtype, false), DataTypes.toType(sin, dtype, false)};
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
