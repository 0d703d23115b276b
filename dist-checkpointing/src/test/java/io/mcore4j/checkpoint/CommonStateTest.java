package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

class CommonStateTest {
    private final CommonState state = new CommonState(values());

    private static Map<String, Object> values() {
        Map<String, Object> m = new HashMap<>();
        m.put("iteration", 40L);
        m.put("loss_scale", 65536.0);
        m.put("lr", 1.5e-4);
        m.put("name", "gpt");
        m.put("fp16", true);
        m.put("seeds", List.of(1L, 2L));
        m.put("nothing", null);
        return m;
    }

    @Test
    void readsEachJsonTypeAsTheTypeAskedFor() {
        assertEquals(40L, state.getLong("iteration"));
        assertEquals(40, state.getInt("iteration"));
        assertEquals(40.0, state.getDouble("iteration"));
        assertEquals(65536L, state.getLong("loss_scale"), "a whole decimal is an integer");
        assertEquals(1.5e-4, state.getDouble("lr"));
        assertEquals("gpt", state.getString("name"));
        assertTrue(state.getBoolean("fp16"));
        assertEquals(List.of(1L, 2L), state.getList("seeds"));
        assertTrue(state.contains("nothing"));
        assertFalse(state.contains("absent"));
    }

    @Test
    void namesTheKeyAndTheValueWhenTheTypeIsWrong() {
        CorruptCheckpointException e = assertThrows(CorruptCheckpointException.class, () -> state.getLong("lr"));
        assertEquals("the checkpoint's common state holds lr = 1.5E-4, not an integer", e.getMessage());
        assertThrows(CorruptCheckpointException.class, () -> state.getDouble("name"));
        assertEquals("the checkpoint's common state has no 'absent' (its keys: [fp16, iteration, loss_scale, lr, name,"
                + " nothing, seeds])", assertThrows(CorruptCheckpointException.class, () -> state.getLong("absent")).getMessage());
        assertEquals("the checkpoint's common state holds nothing = null",
                assertThrows(CorruptCheckpointException.class, () -> state.getString("nothing")).getMessage());
    }

    @Test
    void aLoadResultOffersTheTypedView() {
        LoadResult r = new LoadResult(Map.of("iteration", 7L), List.of(), List.of());
        assertEquals(7L, r.commonState().getLong("iteration"));
    }
}
