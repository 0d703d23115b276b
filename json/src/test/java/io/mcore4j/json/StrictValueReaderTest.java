package io.mcore4j.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.Strictness;
import com.google.gson.stream.JsonReader;
import java.io.IOException;
import java.io.StringReader;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class StrictValueReaderTest {
    /** Numbers as their literal text; errors carry the key and the noted position. */
    private static final StrictValueReader LITERALS = new StrictValueReader() {
        @Override
        protected Object number(JsonReader reader) throws IOException {
            return "#" + reader.nextString();
        }

        @Override
        protected Object keyPosition(JsonReader reader) {
            return reader.getPath();
        }

        @Override
        protected RuntimeException duplicateKey(JsonReader reader, String key, Object position) {
            return new IllegalArgumentException(key + "@" + position);
        }

        @Override
        protected RuntimeException notAValue(JsonReader reader) throws IOException {
            return new IllegalArgumentException("not a value: " + reader.peek());
        }
    };

    private static Object read(String text) throws IOException {
        JsonReader reader = new JsonReader(new StringReader(text));
        reader.setStrictness(Strictness.STRICT);
        return LITERALS.read(reader);
    }

    @Test
    void buildsOrderedMutableValuesWithTheNumberHook() throws IOException {
        Object value = read("{\"b\": [1, 2.5e3, \"x\", true, null], \"a\": {}}");
        Map<?, ?> map = (Map<?, ?>) value;
        assertEquals(List.of("b", "a"), new ArrayList<>(map.keySet()));
        assertEquals(Arrays.asList("#1", "#2.5e3", "x", true, null), map.get("b"));
        assertEquals(Map.of(), map.get("a"));
        assertNull(read("null"));
    }

    @Test
    void refusesARepeatedKeyInOneObjectOnlyThroughTheHook() throws IOException {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> read("{\"o\": {\"k\": 1, \"j\": 2, \"k\": 3}}"));
        assertEquals("k@$.o.j", e.getMessage());
        // the same key in sibling objects is fine
        assertEquals(2, ((List<?>) read("[{\"k\": 1}, {\"k\": 2}]")).size());
    }

    @Test
    void leavesGsonsOwnErrorsToTheCaller() {
        assertThrows(IOException.class, () -> read("[1,]"));
        assertThrows(IOException.class, () -> read(""));
    }

    @Test
    void asksTheHookForTheErrorWhereNoValueStands() throws IOException {
        JsonReader reader = new JsonReader(new StringReader("7"));
        reader.setStrictness(Strictness.STRICT);
        assertEquals("#7", LITERALS.read(reader));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LITERALS.read(reader));
        assertEquals("not a value: END_DOCUMENT", e.getMessage());
    }
}
