package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.NoGrad;

/**
 * Every local expert's rows times that expert's weight, in one call for all experts (the grouped GEMM of
 * Megatron-Core's {@code --moe-grouped-gemm}): rows {@code [N, k]} that come expert by expert, {@code counts[e]}
 * rows for expert {@code e} (any of them 0), and weights {@code [E, n, k]} give {@code [N, n]} with
 * {@code out[rows of e] = rows of e · weights[e]^T}. Differentiable in the rows and the weights.
 *
 * <p>Two implementations compute the same products; {@link #select} picks one per device and dtype:
 * <ul>
 *   <li>{@link Kernel}: libtorch's grouped kernel {@code torch._grouped_mm}, through mcore4j's TorchScript archive
 *       {@code grouped_mm.pt} ({@code scripts/make_grouped_mm_module.py}). The op exists from libtorch 2.8 on, and
 *       its kernels take some dtypes and devices only; so the archive is loaded and a small product with an empty
 *       group is run forward and backward on the layer's device and dtype, and any failure selects the fallback.
 *       It needs both widths to be multiples of 16 bytes and at least one row; other calls run the fallback.</li>
 *   <li>{@link Padded}: each expert's rows padded with zero rows to the largest count, one batched matmul
 *       {@code [E, max, k] x [E, k, n]}, the padding dropped. Without padding (equal counts) it is one reshape and
 *       one batched matmul.</li>
 * </ul>
 */
abstract sealed class GroupedMatmul permits GroupedMatmul.Kernel, GroupedMatmul.Padded {
    /** Resource path of the TorchScript archive that calls {@code torch._grouped_mm}. */
    static final String RESOURCE = "/io/mcore4j/moe/grouped_mm.pt";

    /** The fallback; stateless, so one instance serves every layer. */
    static final GroupedMatmul PADDED = new Padded();

    /**
     * {@code out[rows of e] = rows of e · weights[e]^T} for every expert.
     *
     * @param scope the pass's scope; owns the result
     * @param rows {@code [N, k]}, expert by expert
     * @param weights {@code [E, n, k]}, in the rows' dtype
     * @param counts rows per expert, {@code E} of them, summing to {@code N}
     * @return {@code [N, n]}
     */
    abstract NDArray apply(AutogradScope scope, NDArray rows, NDArray weights, long[] counts);

    /**
     * The products of {@link #apply(AutogradScope, NDArray, NDArray, long[])} for groups prepared once per pass
     * ({@link #groups}), so that a layer's two products share one tensor of group ends.
     *
     * @param scope the pass's scope; owns the result
     * @param rows {@code [N, k]}, expert by expert
     * @param weights {@code [E, n, k]}, in the rows' dtype
     * @param groups the rows per expert
     * @return {@code [N, n]}
     */
    NDArray apply(AutogradScope scope, NDArray rows, NDArray weights, Groups groups) {
        return apply(scope, rows, weights, groups.counts());
    }

    /**
     * The rows per expert of a pass, with their running sums on the rows' device where this implementation reads
     * them there: the given {@code ends}, else (for the kernel) one copy of the host's sums, made here once.
     *
     * @param counts rows per expert
     * @param ends their running sums as int32 on the rows' device, or null
     * @param rows the rows (for their device)
     * @param owner owns a tensor made here
     * @return the groups
     */
    Groups groups(long[] counts, NDArray ends, NDArray rows, NDManager owner) {
        return new Groups(counts.clone(), ends);
    }

    /**
     * Rows per expert and, where known, their running sums on the device.
     *
     * @param counts rows per expert
     * @param ends int32 running sums on the rows' device, or null
     */
    record Groups(long[] counts, NDArray ends) {}

    /**
     * libtorch's grouped kernel where this runtime, device and dtype run it forward and backward, else
     * {@link #PADDED}.
     *
     * @param device a manager on the experts' device (not closed here)
     * @param dtype the experts' dtype
     * @return the implementation
     */
    static GroupedMatmul select(NDManager device, DataType dtype) {
        TorchScriptModule module;
        try {
            module = TorchScriptModules.shared(GroupedMatmul.class, RESOURCE);
        } catch (RuntimeException e) {
            return PADDED; // a libtorch before 2.8: the archive names an op it does not have
        }
        Kernel kernel = new Kernel(module);
        return kernel.runs(device, dtype) ? kernel : PADDED;
    }

    /** Through {@code torch._grouped_mm}. */
    static final class Kernel extends GroupedMatmul {
        private final TorchScriptModule module;

        private Kernel(TorchScriptModule module) {
            this.module = module;
        }

        @Override
        NDArray apply(AutogradScope scope, NDArray rows, NDArray weights, long[] counts) {
            return apply(scope, rows, weights, groups(counts, null, rows, scope.manager()));
        }

        @Override
        NDArray apply(AutogradScope scope, NDArray rows, NDArray weights, Groups groups) {
            long k = rows.getShape().get(1);
            long n = weights.getShape().get(1);
            int bytes = DataTypes.of(rows).getNumOfBytes();
            if (groups.ends() == null || k * bytes % 16 != 0 || n * bytes % 16 != 0) {
                return PADDED.apply(scope, rows, weights, groups.counts());
            }
            NDManager m = scope.manager();
            return Tensors.own(module.forward(new NDList(rows, weights, groups.ends())).singletonOrThrow(), m);
        }

        /** The given ends, else the host's running sums copied once; none (the fallback runs) without rows. */
        @Override
        Groups groups(long[] counts, NDArray ends, NDArray rows, NDManager owner) {
            if (rows.getShape().get(0) == 0) {
                return new Groups(counts.clone(), null);
            }
            if (ends != null) {
                return new Groups(counts.clone(), ends);
            }
            int[] host = new int[counts.length];
            long end = 0;
            for (int e = 0; e < counts.length; e++) {
                end += counts[e];
                host[e] = Math.toIntExact(end);
            }
            return new Groups(counts.clone(), Tensors.fromHost(host, new Shape(host.length), owner));
        }

        /** Whether a product with an empty group runs forward and backward here and agrees with the fallback. */
        private boolean runs(NDManager device, DataType dtype) {
            try (NDManager probe = device.newSubManager(); AutogradScope scope = AutogradScope.open(probe)) {
                NDManager m = scope.manager();
                long[] counts = {0, 2, 1};
                NDArray rows = DataTypes.toType(m.arange(48f).reshape(3, 16).div(48), dtype, false);
                NDArray weights = DataTypes.toType(m.arange(3 * 8 * 16f).reshape(3, 8, 16).div(384), dtype, false);
                weights.attach(m);
                weights.setRequiresGradient(true);
                NDArray got = apply(scope, rows, weights, counts);
                NDArray want = PADDED.apply(scope, rows, weights, counts);
                // DataTypes.ones, not onesLike: DJL's ones aborts the process on a dtype it has no name for (bf16)
                NDArray upstream = DataTypes.ones(m, got.getShape(), DataTypes.of(got), got.getDevice());
                scope.backward(new NDArray[] {got}, new NDArray[] {upstream});
                try (NoGrad ignored = NoGrad.enter()) {
                    double error = largest(got.sub(want), m);
                    return error <= 1e-2 * largest(want, m);
                }
            } catch (RuntimeException e) {
                return false;
            }
        }

        private static double largest(NDArray x, NDManager m) {
            return Tensors.own(Tensors.own(x.abs().max(), m).toType(DataType.FLOAT32, false), m).getFloat();
        }

        @Override
        public String toString() {
            return "GroupedMatmul{torch._grouped_mm}";
        }
    }

    /** Rows padded per expert to the largest count, one batched matmul. */
    static final class Padded extends GroupedMatmul {
        @Override
        NDArray apply(AutogradScope scope, NDArray rows, NDArray weights, long[] counts) {
            NDManager m = scope.manager();
            Layout layout = new Layout(counts);
            NDArray transposed = Tensors.own(weights.transpose(0, 2, 1), m);
            return layout.unpad(Tensors.own(layout.pad(rows, m).matMul(transposed), m), m);
        }

        /**
         * The padded layout of rows that come expert by expert: {@code [E, longest, width]}, expert {@code e}'s rows
         * first in its slab and zero rows after them. Layers that run several products on the same rows (the experts'
         * fc1, activation and fc2) pad once and unpad once; rows computed from padding rows are dropped by
         * {@link #unpad}, so they receive no gradient.
         */
        static final class Layout {
            private final long[] counts;
            private final long total;
            private final long longest;

            /** @param counts rows per expert */
            Layout(long[] counts) {
                this.counts = counts.clone();
                this.total = TokenPermutation.sum(counts, 0, counts.length);
                long most = 0;
                for (long c : counts) {
                    most = Math.max(most, c);
                }
                this.longest = most;
            }

            /** Whether every expert has {@code longest} rows: padding and unpadding are reshapes. */
            private boolean even() {
                return longest * counts.length == total;
            }

            /**
             * @param rows {@code [N, width]}, expert by expert
             * @param m owns the result
             * @return {@code [E, longest, width]}
             */
            NDArray pad(NDArray rows, NDManager m) {
                int experts = counts.length;
                long width = rows.getShape().get(1);
                if (even()) {
                    return Tensors.own(rows.reshape(experts, longest, width), m);
                }
                // padded slot (e, r) reads row offset_e + r, or the appended zero row N past the expert's rows
                long[] padded = new long[Math.toIntExact(experts * longest)];
                long offset = 0;
                for (int e = 0; e < experts; e++) {
                    for (long r = 0; r < longest; r++) {
                        padded[(int) (e * longest + r)] = r < counts[e] ? offset + r : total;
                    }
                    offset += counts[e];
                }
                NDArray withZeroRow = Tensors.own(NDArrays.concat(new NDList(rows,
                        DataTypes.zeros(m, new Shape(1, width), DataTypes.of(rows))), 0), m);
                return Tensors.own(TokenPermutation.rows(withZeroRow, m.create(padded), m).reshape(experts, longest, width), m);
            }

            /**
             * @param slabs {@code [E, longest, width]}
             * @param m owns the result
             * @return {@code [N, width]}: the rows of each expert, padding dropped
             */
            NDArray unpad(NDArray slabs, NDManager m) {
                long width = slabs.getShape().get(2);
                NDArray flat = Tensors.own(slabs.reshape(counts.length * longest, width), m);
                if (even()) {
                    return flat;
                }
                long[] kept = new long[Math.toIntExact(total)];
                long offset = 0;
                for (int e = 0; e < counts.length; e++) {
                    for (long r = 0; r < counts[e]; r++) {
                        kept[(int) (offset + r)] = e * longest + r;
                    }
                    offset += counts[e];
                }
                return TokenPermutation.rows(flat, m.create(kept), m);
            }
        }

        @Override
        public String toString() {
            return "GroupedMatmul{padded batched matmul}";
        }
    }
}
