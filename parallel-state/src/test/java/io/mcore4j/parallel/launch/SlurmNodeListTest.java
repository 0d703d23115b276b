package io.mcore4j.parallel.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class SlurmNodeListTest {

    @Test
    void plainHostsAndCommaLists() {
        assertEquals(List.of("node01"), SlurmNodeList.expand("node01"));
        assertEquals(List.of("a", "b.example.org", "c-1"), SlurmNodeList.expand("a,b.example.org,c-1"));
    }

    @Test
    void rangesKeepTheLowerBoundsPadding() {
        assertEquals(List.of("node01", "node02", "node03", "node04", "node07"), SlurmNodeList.expand("node[01-04,07]"));
        assertEquals(List.of("node8", "node9", "node10"), SlurmNodeList.expand("node[8-10]"));
        assertEquals(List.of("node08", "node09", "node10"), SlurmNodeList.expand("node[08-10]"));
    }

    @Test
    void bracketedAndPlainEntriesMix() {
        assertEquals(List.of("gpu-a1", "gpu-a3", "gpu-b5"), SlurmNodeList.expand("gpu-a[1,3],gpu-b5"));
        assertEquals(List.of("x1", "x2", "y", "z09", "z10"), SlurmNodeList.expand("x[1-2],y,z[09-10]"));
    }

    @Test
    void severalBracketsExpandToTheirProductInOrder() {
        assertEquals(List.of("r1-n1", "r1-n2", "r2-n1", "r2-n2"), SlurmNodeList.expand("r[1-2]-n[1-2]"));
        assertEquals(List.of("r1-n1.ib", "r1-n3.ib"), SlurmNodeList.expand("r1-n[1,3].ib"));
    }

    @ParameterizedTest
    @CsvSource(delimiter = ';', value = {
            "node[01-04,07];node01",
            "gpu-a[1,3],gpu-b5;gpu-a1",
            "login;login",
            "r[2-3]-n[05-06];r2-n05"})
    void firstHost(String list, String first) {
        assertEquals(first, SlurmNodeList.first(list));
        assertEquals(first, SlurmNodeList.expand(list).get(0));
    }

    @Test
    void firstDoesNotExpandHugeRanges() {
        assertEquals("n0", SlurmNodeList.first("n[0-99999999]"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> SlurmNodeList.expand("n[0-99999999]"));
        assertTrue(e.getMessage().contains("more than"), e.getMessage());
    }

    @ParameterizedTest
    @CsvSource(delimiter = ';', value = {
            "node[01-;unclosed bracket",
            "node];never opened",
            "node[4-2];descending range 4-2",
            "node[a-b];'a' where a number was expected",
            "node[];empty bracket",
            "a,,b;empty entry",
            "n[1[2]];nests brackets",
            "n[1-2-3];'2-3' where a number was expected"})
    void malformedListsAreReportedWithTheList(String list, String problem) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> SlurmNodeList.expand(list));
        assertTrue(e.getMessage().contains("'" + list + "'") && e.getMessage().contains(problem), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> SlurmNodeList.first(list));
    }

    @Test
    void emptyListIsRejected() {
        assertThrows(IllegalArgumentException.class, () -> SlurmNodeList.expand(" "));
    }
}
