// The database control service's JSON operations (SPEC 4): one list for the service, its metrics and its OpenAPI.

export type Op = 'query' | 'execute' | 'migrate' | 'status' | 'changes' | 'snapshot' | 'restore' | 'export';
export const OPS: ReadonlySet<string> = new Set<Op>(['query', 'execute', 'migrate', 'status', 'changes', 'snapshot', 'restore', 'export']);
