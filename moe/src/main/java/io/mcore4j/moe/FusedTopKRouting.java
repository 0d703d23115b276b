package io.mcore4j.moe;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.TorchScriptModules;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * {@link TopKRouting#select(AutogradScope, NDArray, TopKRouting.Options, NDArray)} without expert groups (and the
 * load-balancing scores and their top-k map, when asked) in one libtorch call, through mcore4j's TorchScript archive {@code topk_routing.pt}
 * ({@code scripts/make_topk_routing_module.py}): the same ops as {@link TopKRouting#selectComposed} in the same
 * order, so the same choice, values and gradients, where the composed path makes about ten calls from Java and,
 * for logits in a lower precision than float32, two {@link io.mcore4j.core.autograd.Cast} Functions (each a cut of
 * the autograd graph, so a backward traversal of its own). Differentiable in the logits through libtorch's autograd.
 *
 * <p>The options travel as a small float64 host tensor made once per distinct options (and whether an expert bias
 * is given) and kept for the process, as is the empty stand-in for an absent bias; both stay on the host, so the
 * module reads them without a copy from the device. Thread-safe: the process shares one instance.
 */
final class FusedTopKRouting {
    private static final String RESOURCE = "/io/mcore4j/moe/topk_routing.pt";

    /** Owns the option tensors and the empty bias; lives as long as the process. */
    private final NDManager host;
    private final NDArray noBias;
    private final Map<Key, NDArray> optionTensors = new ConcurrentHashMap<>();

    /** The last answer, for a caller that passes the same options object each time (a router: no hashing). */
    private volatile Last last;

    private record Key(TopKRouting.Options options, boolean bias, boolean aux) {}

    private record Last(TopKRouting.Options options, boolean bias, boolean aux, NDArray tensor) {}

    FusedTopKRouting() {
        this.host = Mcore4j.newRootManager().newSubManager(Device.cpu());
        this.noBias = host.zeros(new Shape(0), DataType.FLOAT32);
    }

    /**
     * The selection of {@link TopKRouting#select(AutogradScope, NDArray, TopKRouting.Options, NDArray)}, and with
     * {@code aux} the load-balancing scores and their top-k map, for options without groups, whose arguments the
     * caller checked.
     *
     * @param scope the pass's scope; owns every result
     * @param logits {@code [T, E]}
     * @param options how to choose ({@code numGroups() == 0})
     * @param expertBias float32 {@code [E]} on the logits' device, or null
     * @param aux whether to compute the load-balancing scores and map
     * @return the selection, with the load-balancing scores and map when asked (else null)
     */
    TopKRouting.Scored select(AutogradScope scope, NDArray logits, TopKRouting.Options options, NDArray expertBias,
                              boolean aux) {
        Last hit = last;
        NDArray optionTensor;
        if (hit != null && hit.options() == options && hit.bias() == (expertBias != null) && hit.aux() == aux) {
            optionTensor = hit.tensor();
        } else {
            optionTensor = optionTensors.computeIfAbsent(new Key(options, expertBias != null, aux), this::optionTensor);
            last = new Last(options, expertBias != null, aux, optionTensor);
        }
        NDList out = TorchScriptModules.shared(FusedTopKRouting.class, RESOURCE)
                .forward(new NDList(logits, expertBias != null ? expertBias : noBias, optionTensor));
        out.attach(scope.manager());
        TopKRouting.Selection selection = new TopKRouting.Selection(out.get(0), out.get(1), out.get(2), out.get(3));
        return new TopKRouting.Scored(selection, aux ? out.get(4) : null, aux ? out.get(5) : null);
    }

    private NDArray optionTensor(Key key) {
        TopKRouting.Options o = key.options();
        double[] values = {o.topK(), o.score() == MoeConfig.RouterScore.SIGMOID ? 1 : 0, o.preSoftmax() ? 1 : 0,
                o.scalingFactor(), key.bias() ? 1 : 0, key.aux() ? 1 : 0};
        return host.create(values);
    }
}
