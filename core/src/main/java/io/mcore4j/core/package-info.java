/**
 * Foundations every other mcore4j module stands on: the runtime setup of DJL (offline, no
 * telemetry), small tensor helpers and the error types. Nothing here knows about process groups or
 * communication.
 */
package io.mcore4j.core;
