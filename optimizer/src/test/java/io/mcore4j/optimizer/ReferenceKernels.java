package io.mcore4j.optimizer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.kernel.BucketFillKernel;
import io.mcore4j.core.kernel.KernelProvider;
import io.mcore4j.core.kernel.MasterAdamKernel;

import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A {@link MasterAdamKernel} for the CPU, composed from DJL's ops, so that the optimizer's kernel
 * path (which tensors it hands over, offsets, weight decay per bucket, norm counting, the divisor,
 * writing the model's weights) runs in CPU tests. Registered as a test service, and offered only
 * while {@link #PROPERTY} is {@code true}: every other test keeps the composed optimizer. Likewise a
 * {@link BucketFillKernel} (what the data-parallel reduction hands over: sources, offsets, zero ranges, the scale)
 * while {@link #FILL_PROPERTY} is {@code true}.
 */
public final class ReferenceKernels implements KernelProvider {
    /** System property that turns this provider on. */
    static final String PROPERTY = "mcore4j.test.referenceKernels";
    /** Steps taken through this kernel (so that a test can tell the kernel path ran). */
    static final AtomicInteger STEPS = new AtomicInteger();
    /** System property that turns the bucket fill on. */
    static final String FILL_PROPERTY = "mcore4j.test.referenceBucketFill";
    /** Buckets filled through the fill. */
    static final AtomicInteger FILLS = new AtomicInteger();

    @Override
    public <T> Optional<T> create(Class<T> kernel, Device device) {
        if (kernel == BucketFillKernel.class && !device.isGpu() && Boolean.getBoolean(FILL_PROPERTY)) {
            return Optional.of(kernel.cast(new Fill()));
        }
        if (kernel != MasterAdamKernel.class || device.isGpu() || !Boolean.getBoolean(PROPERTY)) {
            return Optional.empty();
        }
        return Optional.of(kernel.cast(new Adam()));
    }

    /** The update of torch.optim.Adam/AdamW per segment, on views of the bucket's flat buffers. */
    private static final class Adam implements MasterAdamKernel {
        @Override
        public Bound bind(List<Bucket> buckets) {
            // the model tensors' storage, kept through handles of our own (a parameter's leaf handle changes every step)
            List<List<NDArray>> params = new ArrayList<>();
            for (Bucket b : buckets) {
                List<NDArray> ps = new ArrayList<>();
                for (Segment s : b.segments()) {
                    ps.add(Tensors.detach(s.param(), b.master().getManager()));
                }
                params.add(ps);
            }
            return grads -> new Gradients() {
                @Override
                public NDArray sumOfSquares(NDManager owner) {
                    NDArray total = owner.zeros(new Shape(), DataType.FLOAT64);
                    for (int b = 0; b < buckets.size(); b++) {
                        for (NDArray g : grads.get(b)) {
                            if (g != null) {
                                NDArray wide = g.toType(DataType.FLOAT64, true).reshape(-1);
                                total = total.add(buckets.get(b).countsInNorm() ? wide.mul(wide).sum() : wide.sub(wide).sum());
                            }
                        }
                    }
                    return total;
                }

                @Override
                public void step(Step st) {
                    STEPS.incrementAndGet();
                    double bc1 = 1 - Math.pow(st.beta1(), st.step());
                    double bc2 = 1 - Math.pow(st.beta2(), st.step());
                    for (int b = 0; b < buckets.size(); b++) {
                        Bucket bucket = buckets.get(b);
                        double wd = bucket.decays() ? st.weightDecay() : 0;
                        for (int i = 0; i < bucket.segments().size(); i++) {
                            Segment s = bucket.segments().get(i);
                            NDIndex range = new NDIndex(s.offset() + ":" + (s.offset() + s.numel()));
                            NDArray p = bucket.master().get(range);
                            NDArray m = bucket.expAvg().get(range);
                            NDArray v = bucket.expAvgSq().get(range);
                            NDArray grad = grads.get(b).get(i);
                            NDArray g = grad == null ? p.zerosLike()
                                    : grad.toType(DataType.FLOAT32, true).reshape(-1).div(st.gradDivisor());
                            if (wd != 0) {
                                if (st.decoupled()) {
                                    p.muli(1 - st.lr() * wd);
                                } else {
                                    g = g.add(p.mul(wd));
                                }
                            }
                            m.muli(st.beta1()).addi(g.mul(1 - st.beta1()));
                            v.muli(st.beta2()).addi(g.mul(g).mul(1 - st.beta2()));
                            NDArray denom = v.sqrt().div(Math.sqrt(bc2)).add(st.eps());
                            p.subi(m.div(denom).mul(st.lr() / bc1));
                            NDArray target = params.get(b).get(i);
                            Tensors.copyInto(target, DataTypes.toType(p, DataTypes.of(target), true).reshape(target.getShape()));
                        }
                    }
                }
            };
        }
    }

    /** Each range cast to float32, multiplied by the scale there and rounded once to the bucket's dtype. */
    private static final class Fill implements BucketFillKernel {
        @Override
        public void fill(NDArray bucket, DataType bucketDtype, List<Segment> segments, float scale) {
            FILLS.incrementAndGet();
            for (Segment s : segments) {
                NDIndex range = new NDIndex(s.offset() + ":" + (s.offset() + s.numel()));
                NDArray value = s.source() == null ? bucket.getManager().zeros(new Shape(s.numel()), DataType.FLOAT32)
                        : DataTypes.toType(s.source(), DataType.FLOAT32, true).reshape(-1).mul(scale);
                bucket.set(range, DataTypes.toType(value, bucketDtype, false));
            }
        }
    }
}
