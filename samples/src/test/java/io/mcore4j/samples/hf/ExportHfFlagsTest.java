package io.mcore4j.samples.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/** {@code export-hf --dtype}: its values in {@code --help}, and another one refused with exit code 2 naming it. */
class ExportHfFlagsTest {

    @Test
    void dtypeIsOneOfBf16F16F32() {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        CommandLine cli = new CommandLine(new ExportHf()).setOut(new PrintWriter(out)).setErr(new PrintWriter(err));
        assertEquals(0, cli.execute("--help"));
        assertTrue(out.toString().contains("bf16, f16, f32 (default: bf16)"), out.toString());

        assertEquals(2, new CommandLine(new ExportHf()).setOut(new PrintWriter(out)).setErr(new PrintWriter(err))
                .execute("--load", "ckpt", "--save-hf", "out", "--dtype", "fp8"));
        assertTrue(err.toString().lines().findFirst().orElse("").contains("--dtype")
                && err.toString().contains("'fp8'"), err.toString());
    }
}
