package io.mcore4j.parallel.rendezvous;

import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The shared secret of one job: every connection to the rendezvous store and between ranks must
 * prove it knows the token, or it is rejected and logged.
 *
 * <p>The proof is a challenge-response: the accepting side sends a random nonce and the connecting
 * side answers with HMAC-SHA256 keyed by the token over the nonce and what it claims to be, so the
 * token itself never crosses the network and a recorded answer cannot be replayed.
 *
 * <p>Where the token comes from ({@link #fromEnvironment}):
 * <ul>
 *   <li>{@value #ENV_VAR}, if set: use a random value per job (e.g. {@code openssl rand -hex 16} in
 *       the launch script) on any network shared with people or jobs you do not trust.</li>
 *   <li>Otherwise a token derived from what every rank of the job already agrees on: the store's
 *       address and port, the world size, and the launcher's job identifiers
 *       ({@code MCORE4J_JOB_ID}, {@code TORCHELASTIC_RUN_ID}, {@code SLURM_JOB_ID},
 *       {@code PMIX_NAMESPACE}, {@code OMPI_MCA_ess_base_jobid}, those that are set). This is not a
 *       secret: it stops processes of <em>another</em> job (a stale run, a job reusing the port, a
 *       relaunch with a different world size) and stray clients such as port scanners from joining,
 *       which is what goes wrong on a single machine or a cluster's private network. It does not
 *       stop someone who can read the job's environment, or guess it, and wants to interfere; so a
 *       job with a derived token refuses to listen on anything but a loopback address
 *       ({@link #checkMayListen}) unless {@value #ALLOW_DERIVED_VAR}{@code =1} says the network is
 *       trusted.</li>
 * </ul>
 * Instances are immutable; {@link #toString()} names the origin, never the value.
 */
public final class JobToken {
    /** Environment variable that holds an explicit token. */
    public static final String ENV_VAR = "MCORE4J_JOB_TOKEN";

    /**
     * Set to {@code 1} to let a job without {@value #ENV_VAR} listen on a non-loopback address anyway
     * (a private network where every process is trusted).
     */
    public static final String ALLOW_DERIVED_VAR = "MCORE4J_ALLOW_DERIVED_TOKEN";

    /** Job identifiers mixed into a derived token, when set; identical on every rank of a job. */
    public static final List<String> JOB_ID_VARS =
            List.of("MCORE4J_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid");

    private static final String MAC = "HmacSHA256";

    private static final Logger LOG = LoggerFactory.getLogger(JobToken.class);

    private final byte[] key;
    private final String origin;
    private final boolean secret;
    private final boolean networkAllowed;

    private JobToken(byte[] key, String origin, boolean secret, boolean networkAllowed) {
        this.key = key;
        this.origin = origin;
        this.secret = secret;
        this.networkAllowed = networkAllowed;
    }

    /**
     * A token from an explicit secret.
     *
     * @param secret the shared value; not blank
     * @return the token
     */
    public static JobToken of(String secret) {
        Objects.requireNonNull(secret, "secret");
        if (secret.isBlank()) {
            throw new IllegalArgumentException("job token is blank");
        }
        return new JobToken(sha256(secret), "explicit", true, true);
    }

    /**
     * {@value #ENV_VAR} from {@code vars} if set, else a token derived from {@code env} and the job
     * identifiers in {@code vars} (see the class comment for what that protects against).
     *
     * @param vars environment variables, e.g. {@link System#getenv()}
     * @param env this process's launch environment
     * @return the token
     */
    public static JobToken fromEnvironment(Map<String, String> vars, LaunchEnvironment env) {
        String explicit = vars.get(ENV_VAR);
        if (explicit != null && !explicit.isBlank()) {
            return new JobToken(sha256(explicit), ENV_VAR, true, true);
        }
        StringBuilder material = new StringBuilder("mcore4j job|")
                .append(env.masterAddr()).append('|').append(env.masterPort()).append('|').append(env.worldSize());
        List<String> used = new ArrayList<>(List.of("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"));
        for (String name : JOB_ID_VARS) {
            String value = vars.get(name);
            if (value != null && !value.isBlank()) {
                material.append('|').append(name).append('=').append(value.trim());
                used.add(name);
            }
        }
        String allow = vars.getOrDefault(ALLOW_DERIVED_VAR, "").trim();
        return new JobToken(sha256(material.toString()), "derived from " + String.join(", ", used), false,
                allow.equals("1") || allow.equalsIgnoreCase("true"));
    }

    /** @return where the token came from: {@code explicit}, {@value #ENV_VAR}, or {@code derived from ...} */
    public String origin() {
        return origin;
    }

    /** @return true if the token is a secret ({@link #of} or {@value #ENV_VAR}), false if derived from public values */
    public boolean isSecret() {
        return secret;
    }

    /**
     * Checks that a job with this token may listen on {@code bindAddress}: always for a secret token
     * or a loopback address; for a derived token on any other address (every interface included)
     * only with {@value #ALLOW_DERIVED_VAR}{@code =1}, and then with a WARN.
     *
     * @param bindAddress the address a server socket is about to bind
     * @param what what listens, for the message (e.g. {@code rank 0's rendezvous store})
     * @throws IllegalStateException saying how to set a token, if it may not
     */
    public void checkMayListen(InetAddress bindAddress, String what) {
        if (secret || bindAddress.isLoopbackAddress()) {
            return;
        }
        String where = bindAddress.isAnyLocalAddress() ? "every interface (" + bindAddress.getHostAddress() + ")"
                : bindAddress.getHostAddress();
        if (networkAllowed) {
            LOG.warn("{} listens on {} with a job token {}, which anyone who knows those values can present ({}=1)",
                    what, where, origin, ALLOW_DERIVED_VAR);
            return;
        }
        throw new IllegalStateException(what + " would listen on " + where + " with a job token " + origin
                + ", which anyone who knows or guesses those values could present to join the job and receive its data."
                + " Set " + ENV_VAR + " to the same random secret on every rank (e.g. export " + ENV_VAR
                + "=$(openssl rand -hex 16) in the launch script), or set " + ALLOW_DERIVED_VAR + "=1 on a trusted network");
    }

    /** Answer to {@code challenge}: HMAC-SHA256 keyed by this token. */
    byte[] prove(byte[] challenge) {
        try {
            Mac mac = Mac.getInstance(MAC);
            mac.init(new SecretKeySpec(key, MAC));
            return mac.doFinal(challenge);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("the JDK lacks " + MAC, e);
        }
    }

    /** Whether {@code answer} proves knowledge of this token for {@code challenge}, in constant time. */
    boolean verify(byte[] challenge, byte[] answer) {
        return MessageDigest.isEqual(prove(challenge), answer);
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("the JDK lacks SHA-256", e);
        }
    }

    @Override
    public String toString() {
        return "JobToken[" + origin + "]";
    }
}
