package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@link TopKRouter#routeLogits} against Megatron-Core's own {@code TopKRouter.routing} (router.json, written by
 * scripts/megatron-fixtures/generate.py, which runs Megatron's router on one CPU rank): sigmoid scores with an
 * expert bias, group-limited top-k, top-k scaling, {@code aux_loss}, {@code seq_aux_loss}, {@code global_aux_loss}
 * (alone and as lists of types), the z-loss and capacity with padding, each on smooth logits and on logits full of
 * ties. The routing map must be Megatron's exactly; the probabilities, the logits' gradient (which carries every
 * auxiliary loss's gradient), the token counts and the updated expert bias equal to float32 rounding.
 */
class MegatronRouterTest {
    private static JsonObject fixture;

    @BeforeAll
    static void load() {
        fixture = MegatronFixtures.read("router.json");
    }

    @Test
    void everyRoutingOptionMatchesMegatronsRouter() {
        int seq = fixture.get("sequence_length").getAsInt();
        int batch = fixture.get("batch").getAsInt();
        int experts = fixture.get("experts").getAsInt();
        int checked = 0;
        try (NDManager m = NDManager.newBaseManager()) {
            for (JsonElement e : fixture.getAsJsonArray("cases")) {
                JsonObject c = e.getAsJsonObject();
                String where = c.get("name").getAsString() + " on " + c.get("logits").getAsString() + " logits";
                MoeConfig config = config(c.getAsJsonObject("options"), experts);
                try (NDManager layer = m.newSubManager();
                     TopKRouter router = new TopKRouter(config, 8, MoeGroups.of(Fixtures.soloGroups()), layer, 1, null,
                             new AuxLossScale());
                     AutogradScope scope = AutogradScope.open(layer)) {
                    if (config.auxLossFree()) {
                        Tensors.copyInto(router.expertBias(), floats(layer, fixture.getAsJsonArray("expert_bias")));
                    }
                    NDArray logits = Fixtures.leaf(MegatronFixtures.matrix(layer, fixture.getAsJsonObject("logit_sets")
                            .getAsJsonArray(c.get("logits").getAsString())), scope.manager());
                    Routing routing = router.routeLogits(scope, logits, seq, batch);
                    scope.backward(new NDArray[] {routing.probs()},
                            new NDArray[] {MegatronFixtures.matrix(scope.manager(), fixture.getAsJsonArray("upstream"))});
                    assertEquals(MegatronFixtures.bits(c.getAsJsonArray("routing_map")),
                            MegatronFixtures.bits(routing.routingMap()), where + ": routing map");
                    assertClose(where + ": probs", c.getAsJsonArray("probs"), routing.probs(), 2e-7);
                    assertClose(where + ": logits gradient", c.getAsJsonArray("logits_grad"),
                            Fixtures.grad(logits, scope.manager()), 1e-6);
                    if (config.auxLossFree()) {
                        assertClose(where + ": tokens per expert", c.getAsJsonArray("tokens_per_expert"),
                                router.localTokenCounts(), 0);
                        router.updateExpertBias();
                        assertClose(where + ": updated expert bias", c.getAsJsonArray("updated_expert_bias"),
                                router.expertBias(), 1e-7);
                    }
                }
                checked++;
            }
        }
        assertEquals(16, checked);
    }

    /** The layer options of a case, from Megatron's config field names. */
    private static MoeConfig config(JsonObject o, int experts) {
        MoeConfig.Builder b = MoeConfig.builder(experts, o.get("moe_router_topk").getAsInt(), 8)
                .biasUpdateRate(fixture.get("bias_update_rate").getAsDouble());
        if (o.has("moe_router_score_function")) {
            b.routerScore(MoeConfig.RouterScore.valueOf(o.get("moe_router_score_function").getAsString()
                    .toUpperCase(Locale.ROOT)));
        }
        if (o.has("moe_router_enable_expert_bias")) {
            b.auxLossFree(o.get("moe_router_enable_expert_bias").getAsBoolean());
        }
        if (o.has("moe_router_pre_softmax")) {
            b.preSoftmax(o.get("moe_router_pre_softmax").getAsBoolean());
        }
        if (o.has("moe_router_num_groups")) {
            b.groupLimitedRouting(o.get("moe_router_num_groups").getAsInt(), o.get("moe_router_group_topk").getAsInt());
        }
        if (o.has("moe_router_topk_scaling_factor")) {
            b.topKScalingFactor(o.get("moe_router_topk_scaling_factor").getAsDouble());
        }
        if (o.has("moe_z_loss_coeff")) {
            b.zLossCoeff(o.get("moe_z_loss_coeff").getAsDouble());
        }
        if (o.has("moe_expert_capacity_factor")) {
            b.capacityFactor(o.get("moe_expert_capacity_factor").getAsDouble())
                    .padToCapacity(o.get("moe_pad_expert_input_to_capacity").getAsBoolean());
        }
        List<String> types = new ArrayList<>();
        List<Double> coeffs = new ArrayList<>();
        JsonElement type = o.get("moe_router_load_balancing_type");
        for (JsonElement t : asArray(type)) {
            types.add(t.getAsString());
        }
        JsonElement coeff = o.get("moe_aux_loss_coeff");
        for (JsonElement k : coeff == null ? new JsonArray() : asArray(coeff)) {
            coeffs.add(k.getAsDouble());
        }
        for (int i = 0; i < types.size(); i++) {
            switch (types.get(i)) {
                case "aux_loss" -> b.auxLossCoeff(coeffs.get(i));
                case "seq_aux_loss" -> b.seqAuxLossCoeff(coeffs.get(i));
                case "global_aux_loss" -> b.globalAuxLossCoeff(coeffs.get(i));
                case "none" -> { }
                default -> throw new AssertionError("load-balancing type " + types.get(i));
            }
        }
        return b.build();
    }

    /** {@code e} itself when it is a list, else a list of it alone (Megatron's options take one value or a list). */
    private static JsonArray asArray(JsonElement e) {
        if (e.isJsonArray()) {
            return e.getAsJsonArray();
        }
        JsonArray a = new JsonArray();
        a.add(e);
        return a;
    }

    private static NDArray floats(NDManager m, JsonArray values) {
        float[] v = new float[values.size()];
        for (int i = 0; i < v.length; i++) {
            v[i] = values.get(i).getAsFloat();
        }
        return m.create(v);
    }

    /** Every value of {@code actual} (flattened) against the fixture's values (rows or one list), within {@code tolerance}. */
    private static void assertClose(String what, JsonArray expected, NDArray actual, double tolerance) {
        float[] a = actual.toFloatArray();
        int i = 0;
        for (JsonElement row : expected) {
            for (JsonElement v : asArray(row)) {
                assertEquals(v.getAsDouble(), a[i], tolerance, what + " [" + i + "]");
                i++;
            }
        }
        assertEquals(i, a.length, what + ": number of values");
    }
}
