/*
 * A STAND-IN for libnrt.so, for tests only. It is NOT the Neuron Runtime.
 *
 * It implements, on host memory, the subset of the public libnrt C API (nrt.h, nrt_experimental.h
 * of aws-neuron/aws-neuron-sdk, src/libnrt/include/nrt/) that nkipy_runtime.nrt binds, with the
 * same signatures, so that the ctypes marshalling (argument types, sizes, offsets, names, pointers,
 * the nrt_tensor_info_array_t layout, status codes) is exercised with real bytes. It also
 * records calls (standin_calls, standin_last_*), fails the next call of a given name with a given
 * status on demand (standin_fail_next), and
 * "executes" a text NEFF format of its own:
 *
 *   NKIPY-STANDIN-NEFF
 *   op <add|copy>
 *   input <name> <nrt_dtype> <dim>x<dim>...
 *   output <name> <nrt_dtype> <dim>x<dim>...
 *
 * "add" sums all inputs (float32) into the single output; "copy" copies input i to output i
 * byte for byte. Tensor info lists the tensors in file order.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int NRT_STATUS;
enum { NRT_SUCCESS = 0, NRT_INVALID = 2, NRT_UNINITIALIZED = 13 };

#define NAME_MAX_ 256
#define MAX_TENSORS 16
#define MAX_DIMS 8

typedef struct nrt_tensor {
    char name[NAME_MAX_];
    size_t size;
    unsigned char *data;     /* owned unless is_slice */
    int is_slice;
} nrt_tensor_t;

typedef struct nrt_tensor_info {
    char name[NAME_MAX_];
    int usage;               /* nrt_tensor_usage_t: 0 input, 1 output */
    size_t size;
    int dtype;               /* nrt_dtype_t */
    uint32_t *shape;
    uint32_t ndim;
} nrt_tensor_info_t;

typedef struct nrt_tensor_info_array {
    uint64_t tensor_count;
    nrt_tensor_info_t tensor_array[];
} nrt_tensor_info_array_t;

typedef struct nrt_model {
    char op[16];
    int count;
    nrt_tensor_info_t info[MAX_TENSORS];
    uint32_t shapes[MAX_TENSORS][MAX_DIMS];
    int vnc;
} nrt_model_t;

typedef struct tensor_set {
    int count;
    char names[MAX_TENSORS][NAME_MAX_];
    nrt_tensor_t *tensors[MAX_TENSORS];
} tensor_set_t;

/* ------------------------------------------------------------------ recording and failing */

#define MAX_CALL_KINDS 32
static char call_names[MAX_CALL_KINDS][48];
static int call_counts[MAX_CALL_KINDS];
static char last_call[48];
static long long last_ints[6];
static char last_strs[2][NAME_MAX_];
static int fail_status = 0;
static char fail_call[48];
static int initialized = 0;
static long long live_tensors = 0;

static void record(const char *name) {
    int i;
    snprintf(last_call, sizeof last_call, "%s", name);
    memset(last_ints, 0, sizeof last_ints);
    memset(last_strs, 0, sizeof last_strs);
    for (i = 0; i < MAX_CALL_KINDS && call_names[i][0]; i++) {
        if (strcmp(call_names[i], name) == 0) { call_counts[i]++; return; }
    }
    if (i < MAX_CALL_KINDS) { snprintf(call_names[i], sizeof call_names[i], "%s", name); call_counts[i] = 1; }
}

/* Lines appended to $NRT_STANDIN_LOG survive the process: how a test sees nrt_close run at exit. */
static void log_line(const char *name, const char *detail) {
    const char *path = getenv("NRT_STANDIN_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) { fprintf(f, "%s %s\n", name, detail); fclose(f); }
}

/* The status the current call must return: the one armed by standin_fail_next for this call. */
static int take_failure(const char *name) {
    if (!fail_status || strcmp(fail_call, name) != 0) return 0;
    int s = fail_status;
    fail_status = 0;
    return s;
}

void standin_fail_next(const char *call, int status) {
    snprintf(fail_call, sizeof fail_call, "%s", call);
    fail_status = status;
}
int standin_calls(const char *name) {
    for (int i = 0; i < MAX_CALL_KINDS && call_names[i][0]; i++)
        if (strcmp(call_names[i], name) == 0) return call_counts[i];
    return 0;
}
const char *standin_last_call(void) { return last_call; }
long long standin_last_int(int i) { return last_ints[i]; }
const char *standin_last_str(int i) { return last_strs[i]; }
long long standin_live_tensors(void) { return live_tensors; }
int standin_initialized(void) { return initialized; }

#define BEGIN(name) record(name); { int failure_ = take_failure(name); if (failure_) return failure_; }

/* ------------------------------------------------------------------ nrt.h */

NRT_STATUS nrt_init(int framework, const char *fw_version, const char *fal_version) {
    BEGIN("nrt_init");
    last_ints[0] = framework;
    snprintf(last_strs[0], NAME_MAX_, "%s", fw_version ? fw_version : "");
    snprintf(last_strs[1], NAME_MAX_, "%s", fal_version ? fal_version : "");
    const char *visible = getenv("NEURON_RT_VISIBLE_CORES");
    log_line("nrt_init", visible ? visible : "<unset>");
    initialized = 1;
    return NRT_SUCCESS;
}

void nrt_close(void) {
    record("nrt_close");
    log_line("nrt_close", "");
    initialized = 0;
}

NRT_STATUS nrt_get_total_nc_count(uint32_t *nc_count) {
    BEGIN("nrt_get_total_nc_count");
    const char *n = getenv("NRT_STANDIN_CORES");
    *nc_count = (uint32_t)(n ? atoi(n) : 2);
    return NRT_SUCCESS;
}

static int parse_dims(const char *text, uint32_t *dims) {
    int n = 0;
    const char *p = text;
    while (*p && n < MAX_DIMS) {
        dims[n++] = (uint32_t)strtoul(p, (char **)&p, 10);
        if (*p == 'x') p++; else break;
    }
    return n;
}

static size_t dtype_size(int dtype) {
    switch (dtype) {
        case 0x3: case 0x2: return 1;                 /* u8, i8 */
        case 0x5: case 0x4: case 0x6: case 0x7: return 2; /* u16, i16, bf16, f16 */
        case 0x9: case 0x8: case 0xA: return 4;       /* u32, i32, f32 */
        case 0x1: case 0xC: return 8;                 /* u64, i64 */
        default: return 0;
    }
}

NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count, nrt_model_t **model) {
    BEGIN("nrt_load");
    last_ints[0] = (long long)size; last_ints[1] = vnc; last_ints[2] = vnc_count;
    if (!initialized) return NRT_UNINITIALIZED;
    char *text = malloc(size + 1);
    memcpy(text, neff_bytes, size);
    text[size] = 0;
    nrt_model_t *m = calloc(1, sizeof *m);
    m->vnc = vnc;
    char *save = NULL;
    int ok = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char kind[16], name[NAME_MAX_], dims[128];
        int dtype;
        if (strcmp(line, "NKIPY-STANDIN-NEFF") == 0) { ok = 1; continue; }
        if (sscanf(line, "op %15s", m->op) == 1) continue;
        if (sscanf(line, "%15s %255s %d %127s", kind, name, &dtype, dims) == 4 && m->count < MAX_TENSORS) {
            nrt_tensor_info_t *t = &m->info[m->count];
            snprintf(t->name, NAME_MAX_, "%s", name);
            t->usage = strcmp(kind, "output") == 0;
            t->dtype = dtype;
            t->shape = m->shapes[m->count];
            t->ndim = (uint32_t)parse_dims(dims, t->shape);
            t->size = dtype_size(dtype);
            for (uint32_t d = 0; d < t->ndim; d++) t->size *= t->shape[d];
            m->count++;
        }
    }
    free(text);
    if (!ok) { free(m); return NRT_INVALID; }
    *model = m;
    return NRT_SUCCESS;
}

NRT_STATUS nrt_unload(nrt_model_t *model) {
    BEGIN("nrt_unload");
    free(model);
    return NRT_SUCCESS;
}

NRT_STATUS nrt_allocate_tensor_set(tensor_set_t **result) {
    BEGIN("nrt_allocate_tensor_set");
    *result = calloc(1, sizeof **result);
    return NRT_SUCCESS;
}

void nrt_destroy_tensor_set(tensor_set_t **tensor_set) {
    record("nrt_destroy_tensor_set");
    free(*tensor_set);
    *tensor_set = NULL;
}

NRT_STATUS nrt_add_tensor_to_tensor_set(tensor_set_t *set, const char *name, nrt_tensor_t *tensor) {
    BEGIN("nrt_add_tensor_to_tensor_set");
    snprintf(last_strs[0], NAME_MAX_, "%s", name);
    if (set->count >= MAX_TENSORS) return NRT_INVALID;
    snprintf(set->names[set->count], NAME_MAX_, "%s", name);
    set->tensors[set->count++] = tensor;
    return NRT_SUCCESS;
}

static nrt_tensor_t *find(const tensor_set_t *set, const char *name) {
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->names[i], name) == 0) return set->tensors[i];
    return NULL;
}

NRT_STATUS nrt_execute(nrt_model_t *model, const tensor_set_t *input_set, tensor_set_t *output_set) {
    BEGIN("nrt_execute");
    nrt_tensor_t *ins[MAX_TENSORS], *outs[MAX_TENSORS];
    int n_in = 0, n_out = 0;
    for (int i = 0; i < model->count; i++) {
        nrt_tensor_info_t *t = &model->info[i];
        nrt_tensor_t *bound = find(t->usage ? output_set : input_set, t->name);
        if (!bound || bound->size != t->size) return NRT_INVALID;  /* missing or mis-sized tensor */
        if (t->usage) outs[n_out++] = bound; else ins[n_in++] = bound;
    }
    if (strcmp(model->op, "copy") == 0) {
        for (int i = 0; i < n_in && i < n_out; i++) memcpy(outs[i]->data, ins[i]->data, ins[i]->size);
    } else if (strcmp(model->op, "add") == 0) {
        float *out = (float *)outs[0]->data;
        size_t n = outs[0]->size / sizeof(float);
        for (size_t k = 0; k < n; k++) {
            float acc = 0.0f;
            for (int i = 0; i < n_in; i++) acc += ((const float *)ins[i]->data)[k];
            out[k] = acc;
        }
    } else {
        return NRT_INVALID;
    }
    return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_allocate(int placement, int vnc, size_t size, const char *name, nrt_tensor_t **tensor) {
    BEGIN("nrt_tensor_allocate");
    last_ints[0] = placement; last_ints[1] = vnc; last_ints[2] = (long long)size;
    snprintf(last_strs[0], NAME_MAX_, "%s", name ? name : "");
    nrt_tensor_t *t = calloc(1, sizeof *t);
    snprintf(t->name, NAME_MAX_, "%s", name ? name : "");
    t->size = size;
    t->data = calloc(size ? size : 1, 1);
    live_tensors++;
    *tensor = t;
    return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_allocate_slice(const nrt_tensor_t *source, size_t offset, size_t size, const char *name,
                                     nrt_tensor_t **slice) {
    BEGIN("nrt_tensor_allocate_slice");
    last_ints[0] = (long long)offset; last_ints[1] = (long long)size;
    snprintf(last_strs[0], NAME_MAX_, "%s", name ? name : "");
    if (offset + size > source->size) return NRT_INVALID;
    nrt_tensor_t *t = calloc(1, sizeof *t);
    snprintf(t->name, NAME_MAX_, "%s", name ? name : "");
    t->size = size;
    t->data = source->data + offset;
    t->is_slice = 1;
    live_tensors++;
    *slice = t;
    return NRT_SUCCESS;
}

void nrt_tensor_free(nrt_tensor_t **tensor) {
    record("nrt_tensor_free");
    if (!*tensor) return;
    if (!(*tensor)->is_slice) free((*tensor)->data);
    free(*tensor);
    *tensor = NULL;
    live_tensors--;
}

NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset, size_t size) {
    BEGIN("nrt_tensor_read");
    last_ints[0] = (long long)offset; last_ints[1] = (long long)size;
    if (offset + size > tensor->size) return NRT_INVALID;
    memcpy(buf, tensor->data + offset, size);
    return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset, size_t size) {
    BEGIN("nrt_tensor_write");
    last_ints[0] = (long long)offset; last_ints[1] = (long long)size;
    if (offset + size > tensor->size) return NRT_INVALID;
    memcpy(tensor->data + offset, buf, size);
    return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_copy(const nrt_tensor_t *src, size_t src_offset, nrt_tensor_t *dst, size_t dst_offset,
                           size_t size) {
    BEGIN("nrt_tensor_copy");
    last_ints[0] = (long long)src_offset; last_ints[1] = (long long)dst_offset; last_ints[2] = (long long)size;
    if (src_offset + size > src->size || dst_offset + size > dst->size) return NRT_INVALID;
    memmove(dst->data + dst_offset, src->data + src_offset, size);
    return NRT_SUCCESS;
}

/* ------------------------------------------------------------------ nrt_experimental.h */

NRT_STATUS nrt_get_model_tensor_info(nrt_model_t *model, nrt_tensor_info_array_t **tensor_info) {
    BEGIN("nrt_get_model_tensor_info");
    nrt_tensor_info_array_t *a = malloc(sizeof *a + model->count * sizeof(nrt_tensor_info_t));
    a->tensor_count = (uint64_t)model->count;
    memcpy(a->tensor_array, model->info, model->count * sizeof(nrt_tensor_info_t));
    *tensor_info = a;
    return NRT_SUCCESS;
}

NRT_STATUS nrt_free_model_tensor_info(nrt_tensor_info_array_t *tensor_info) {
    BEGIN("nrt_free_model_tensor_info");
    free(tensor_info);
    return NRT_SUCCESS;
}
