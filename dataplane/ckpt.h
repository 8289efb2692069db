/* ckpt.h: one checkpoint shard file per rank, and CRC32C.
 *
 * File (little-endian), version 1:
 *   header   "YARDCKPT" magic, u32 version, u32 header bytes, then the meta below
 *   table    one 128-byte entry per tensor: name, kind, tensor id, local and full shape,
 *            slice origin, byte offset and element count in the data section
 *   data     the tensors, f32
 *   trailer  u32 CRC32C (Castagnoli) of every byte before it
 * Written atomically: temp file in the same directory, fsync, rename, fsync of the directory.
 * A reader verifies the CRC before it trusts any field, then that the shard belongs to the job,
 * layout and model it is restored into; every refusal names the file and the mismatch.
 * The layout of steps and manifests in a checkpoint directory is trainer.c's business. */
#ifndef YARD_CKPT_H
#define YARD_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define CKPT_MAGIC "YARDCKPT"
#define CKPT_VERSION 1u

struct ckpt_meta {
	char job[64];
	int64_t step; /* steps completed */
	int32_t rank, world, dp, tp, pp, v, m;
	int32_t d_in, d_model, d_ff, layers, classes;
	uint64_t model_seed;
	int32_t optimizer;      /* enum optim_kind */
	int64_t optim_t;        /* optimiser steps taken */
	uint64_t data_seed;     /* the data order is counter-based: (seed, position) is its state */
	uint64_t data_position; /* global sample position of the next step */
};

enum ckpt_tensor_kind { CKPT_PARAM = 0, CKPT_OPTIM_M = 1, CKPT_OPTIM_V = 2 };

struct ckpt_tensor {
	char name[48];
	uint32_t kind; /* enum ckpt_tensor_kind */
	uint32_t tensor_id;
	int32_t rows, cols, row0, col0, full_rows, full_cols;
	float *data; /* write: source; read: destination (rows * cols floats) */
};

uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t len);

int ckpt_write(const char *path, const struct ckpt_meta *meta, const struct ckpt_tensor *t,
               int ntensors, struct yard_err *err);
/* Reads path; requires its meta to equal *expect in everything but step, optim_t and
 * data_position (returned in *got), except that a shard written with another dp over the
 * same tp and pp (world dp x tp x pp) restores into this run's dp (the job shrank or grew back,
 * failure.allow_shrink_dp: replicas are identical; expect->rank names the shard the caller
 * chose), and fills every tensor of t (found by name and kind, with equal shape and slice)
 * from the file. */
int ckpt_read(const char *path, const struct ckpt_meta *expect, struct ckpt_meta *got,
              struct ckpt_tensor *t, int ntensors, struct yard_err *err);

/* Reads the meta of path (after its checksum and format are verified): which job, step and
 * layout a shard is of, before the caller decides how to restore it. */
int ckpt_peek(const char *path, struct ckpt_meta *got, struct yard_err *err);

/* Restores into another layout (tp, pp, virtual stages or micro-batches changed: the job was
 * planned again): paths are the shards of one data-parallel replica of the checkpoint (the
 * tp x pp ranks holding every tensor once), each read whole and verified. Every tensor of t is
 * assembled from the slices of the same name and kind that overlap it, in whichever shards
 * hold them. Refused, naming the file, when a shard is of another job, model, optimiser or data
 * order than *expect, when the shards disagree on step or layout, or when any element of a
 * tensor of t is in none of them. *got is the first shard's meta. */
int ckpt_read_resharded(const char *const *paths, int npaths, const struct ckpt_meta *expect,
                        struct ckpt_meta *got, struct ckpt_tensor *t, int ntensors,
                        struct yard_err *err);

/* Writes a small text file atomically (temp, fsync, rename, fsync dir). */
int ckpt_write_file_atomic(const char *path, const void *buf, size_t len, struct yard_err *err);

#endif
