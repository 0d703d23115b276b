/**
 * A small local launcher, the torchrun of this project: starts one JVM per rank on this machine
 * with the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a
 * fresh job token), serves the job's rendezvous store on a port it holds for the whole job, fails
 * the job as soon as any rank fails (naming it, and killing ranks that do not stop), and stops its
 * ranks when it is terminated itself.
 */
package io.mcore4j.samples.launch;
