// index.d.mts: the types of index.mjs, which re-exports index.cjs: those of index.d.cts.
export * from "./index.cjs";
