/*
 * Loom plugin ABI 2's op table, as ABI 2.7 left it. The runtime keeps that table frozen as
 * loom_ops_v2 (runtime/tensor/ops_v2.h) and hands it to ABI 1 and 2 plugins, so this copy of the
 * ABI 2 headers takes its definition from there: a plugin built here sees the very layout it is
 * given. (Binaries built from git history, at ABI 2.2 and 2.7, check that layout against the
 * headers of their day.)
 */
#ifndef LOOM_OPS_H
#define LOOM_OPS_H

#include <loom/types.h>

#include "../../../../runtime/tensor/ops_v2.h"

typedef loom_ops_v2 loom_ops;

#define LOOM_BLOCKS_SUM 1
#define LOOM_BLOCKS_ADD 2

/* The streams of a device: kernels on one, communication on the other, ordered by events. */
#define LOOM_STREAM_COMPUTE 0
#define LOOM_STREAM_COMM 1

#endif /* LOOM_OPS_H */
