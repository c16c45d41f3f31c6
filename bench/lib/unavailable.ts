/** Thrown when the product (or the peer) cannot serve a workload yet: reported as "unavailable: <reason>", not a failure. */
export class Unavailable extends Error {}
