/*
 * fake_nvml.c -- a scripted libnvidia-ml.so.1 for tests on machines without an NVIDIA driver.
 *
 * Build:  gcc -shared -fPIC -O2 -o libnvidia-ml.so.1 fake_nvml.c
 * Use:    LD_LIBRARY_PATH=<dir of the .so>  FAKE_NVML_STATE=<state file>
 * The real pynvml (nvidia-ml-py 13.615) loads it with CDLL("libnvidia-ml.so.1") and calls the
 * exported symbols below through its own ctypes bindings, so the agent runs unchanged.
 *
 * State file (re-read by nvmlInit* and by every nvmlDeviceGetCount*, i.e. once per agent
 * sweep; write it atomically, temp file + rename). One "key value" per line; '#' comments and
 * blank lines are ignored; the value is the rest of the line. A missing file makes nvmlInit*
 * return NVML_ERROR_DRIVER_NOT_LOADED (9); once initialised, an unreadable file keeps the
 * previous state.
 *
 *   init_error CODE           nvmlInit* returns CODE (e.g. 9 driver not loaded, 18 RM mismatch);
 *                             written after init, nvmlDeviceGetCount* returns it (driver gone)
 *   driver 550.54.15          nvmlSystemGetDriverVersion
 *   nvml_version 12.550.54.15 nvmlSystemGetNVMLVersion
 *   sweep_delay_ms MS         nvmlDeviceGetCount* sleeps MS first (a slow or wedged driver)
 *   gpu                       starts the next GPU (index 0, 1, ...); the keys below apply to it
 *   name NVIDIA H100 80GB HBM3
 *   uuid GPU-...
 *   util PCT                  utilization.gpu     (nvmlDeviceGetUtilizationRates)
 *   mem_util PCT              utilization.memory
 *   mem_used BYTES            allocated memory: v2's used; free = total - reserved - used
 *   mem_reserved BYTES        the driver's reserve: v2's reserved; v1's used = used + reserved
 *   mem_total BYTES           (as real drivers report: nvmlDeviceGetMemoryInfo[_v2])
 *   temp C                    nvmlDeviceGetTemperature[V] (GPU sensor)
 *   power_mw MW               nvmlDeviceGetPowerUsage (milliwatts)
 *   power_limit_mw MW         nvmlDeviceGetEnforcedPowerLimit (milliwatts)
 *   sm_clock MHZ              nvmlDeviceGetClockInfo(NVML_CLOCK_SM); absent or 0 (and any other
 *                             clock type): NVML_ERROR_NOT_SUPPORTED
 *   proc PID BYTES|na         a compute process; "na" -> NVML_VALUE_NOT_AVAILABLE (ULLONG_MAX)
 *   samples_every_us US       nvmlDeviceGetSamples(GPU_UTILIZATION): a generated stream, one
 *   samples_cycle V1 V2 ...   sample every US microseconds of CLOCK_REALTIME (timestamps are
 *   samples_buffer N          multiples of US), values cycling through V1 V2 ... (up to 64);
 *                             the newest N (default 120) are kept, like the driver's ring
 *                             buffer. While a stream is set, nvmlDeviceGetUtilizationRates's
 *                             gpu value is the newest sample's (an instant, as real NVML's is)
 *   sample TS VALUE           an explicit sample (timestamp in µs, raw value; up to 256, served
 *                             in file order, so a test can script disorder and garbage);
 *                             explicit samples replace a generated stream
 *   samples_type T            the nvmlValueType_t reported (default 1, unsigned int; 0 double,
 *                             3 unsigned long long; anything else is served as given)
 *   error FUNC CODE           FUNC returns CODE for this GPU. FUNC is one of: handle name uuid
 *                             util mem (v1 and v2) mem_v2 (only _v2) temp power power_limit
 *                             samples (nvmlDeviceGetSamples) procs (the _v2 and _v3 calls),
 *                             procs_v3 (only _v3: an older driver, with 13 FUNCTION_NOT_FOUND),
 *                             or "all" (every device call except handle, e.g. 15 GPU_IS_LOST);
 *                             health calls: ecc_mode ecc_count (nvmlDeviceGetTotalEccErrors)
 *                             retired remap clocks (Event and Throttle names) pcie (the four
 *                             link calls) persistence events (nvmlDeviceRegisterEvents);
 *                             clock_info (nvmlDeviceGetClockInfo)
 *
 * Health (defaults: a healthy GPU; "retired_pending" absent -> NOT_SUPPORTED, as on Hopper):
 *   ecc_mode 0|1              nvmlDeviceGetEccMode (current and pending)
 *   ecc_uncorrected VOL AGG   nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE / AGGREGATE);
 *   ecc_corrected VOL AGG     the same for CORRECTED
 *   retired_pending 0|1       nvmlDeviceGetRetiredPagesPendingStatus
 *   remap CORR UNC PEND FAIL  nvmlDeviceGetRemappedRows
 *   clock_reasons MASK        nvmlDeviceGetCurrentClocks{Event,Throttle}Reasons (0x.. or decimal)
 *   pcie_gen CUR MAX          nvmlDeviceGetCurrPcieLinkGeneration / GetMaxPcieLinkGeneration
 *   pcie_width CUR MAX        nvmlDeviceGetCurrPcieLinkWidth / GetMaxPcieLinkWidth
 *   persistence 0|1           nvmlDeviceGetPersistenceMode
 *   xid VALUE COUNT           COUNT XID critical-error events so far on this GPU, the last with
 *                             VALUE: an event set registered on it (nvmlDeviceRegisterEvents)
 *                             delivers the ones it has not delivered yet, one per
 *                             nvmlEventSetWait[_v2]; none pending -> NVML_ERROR_TIMEOUT at once
 *
 * Built with -DFAKE_NVML_NO_HEALTH, none of the health or event symbols exist (a driver older
 * than those calls: pynvml raises NVMLError_FunctionNotFound).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10, NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999
};

/* Layouts as in nvml.h (and pynvml's ctypes mirrors). */
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;  /* also nvmlProcessInfo_v2_t: the _v2 and _v3 calls share it */
typedef struct { unsigned int version; unsigned int sensorType; int temperature; } nvmlTemperature_t;
typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;
typedef struct { unsigned long long timeStamp; nvmlValue_t sampleValue; } nvmlSample_t;

#define MAX_GPUS 64
#define MAX_PROCS 64
#define MAX_CYCLE 64
#define MAX_SAMPLES 256
#define NVML_GPU_UTILIZATION_SAMPLES 1
enum { F_HANDLE, F_NAME, F_UUID, F_UTIL, F_MEM, F_MEM_V2, F_TEMP, F_POWER, F_POWER_LIMIT,
       F_SAMPLES, F_PROCS, F_PROCS_V3, F_ECC_MODE, F_ECC_COUNT, F_RETIRED, F_REMAP, F_CLOCKS,
       F_PCIE, F_PERSISTENCE, F_EVENTS, F_CLOCK_INFO, F_N };
static const char *FUNC_NAMES[F_N] = {"handle", "name", "uuid", "util", "mem", "mem_v2", "temp",
                                      "power", "power_limit", "samples", "procs", "procs_v3",
                                      "ecc_mode", "ecc_count", "retired", "remap", "clocks",
                                      "pcie", "persistence", "events", "clock_info"};

typedef struct {
    char name[96], uuid[96];
    unsigned int util, mem_util, temp, power_mw, power_limit_mw, nprocs, sm_clock;
    unsigned long long mem_used, mem_reserved, mem_total;
    unsigned int proc_pid[MAX_PROCS];
    unsigned long long proc_mem[MAX_PROCS];
    int err[F_N];
    int err_all;
    /* utilization samples: a generated stream (every_us > 0) or explicit ones (nsamples > 0) */
    unsigned long long every_us;
    unsigned int ncycle, buffer, nsamples, sample_type;
    unsigned long long cycle[MAX_CYCLE];
    unsigned long long sample_ts[MAX_SAMPLES], sample_val[MAX_SAMPLES];
    /* health */
    unsigned int ecc_mode, persistence, pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    int retired_pending;  /* -1: NOT_SUPPORTED */
    unsigned long long ecc_unc_vol, ecc_unc_agg, ecc_cor_vol, ecc_cor_agg, clock_reasons;
    unsigned int remap_cor, remap_unc, remap_pending, remap_failure;
    unsigned long long xid_value, xid_count;
} fake_gpu;

typedef struct {
    int init_error;
    unsigned long sweep_delay_ms;
    char driver[80], nvml_version[80];
    unsigned int ngpus;
    fake_gpu gpus[MAX_GPUS];
} fake_state;

static fake_state state;       /* what device calls serve; handles point into state.gpus */
static int initialized;

static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

/* Parse the state file into *out. Returns 0, or -1 when the file cannot be opened. */
static int load_state(fake_state *out) {
    const char *path = getenv("FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[512];
    fake_gpu *g = NULL;
    if (!f) return -1;
    memset(out, 0, sizeof *out);
    copy_str(out->driver, sizeof out->driver, "550.54.15");
    copy_str(out->nvml_version, sizeof out->nvml_version, "12.550.54.15");
    while (fgets(line, sizeof line, f)) {
        char *key = line, *val;
        line[strcspn(line, "\r\n")] = 0;
        while (*key == ' ' || *key == '\t') key++;
        if (*key == 0 || *key == '#') continue;
        val = key + strcspn(key, " \t");
        if (*val) *val++ = 0;
        while (*val == ' ' || *val == '\t') val++;
        if (!strcmp(key, "init_error")) out->init_error = atoi(val);
        else if (!strcmp(key, "sweep_delay_ms")) out->sweep_delay_ms = strtoul(val, NULL, 10);
        else if (!strcmp(key, "driver")) copy_str(out->driver, sizeof out->driver, val);
        else if (!strcmp(key, "nvml_version"))
            copy_str(out->nvml_version, sizeof out->nvml_version, val);
        else if (!strcmp(key, "gpu")) {
            g = out->ngpus < MAX_GPUS ? &out->gpus[out->ngpus++] : NULL;
            if (g) {
                g->buffer = 120;
                g->sample_type = 1;  /* NVML_VALUE_TYPE_UNSIGNED_INT */
                g->ecc_mode = g->persistence = 1;  /* a healthy H100 in a PCIe 5 x16 slot */
                g->pcie_gen = g->pcie_gen_max = 5;
                g->pcie_width = g->pcie_width_max = 16;
                g->retired_pending = -1;
            }
        } else if (!g) {
            continue;  /* a per-GPU key before any "gpu" line, or too many GPUs */
        } else if (!strcmp(key, "name")) copy_str(g->name, sizeof g->name, val);
        else if (!strcmp(key, "uuid")) copy_str(g->uuid, sizeof g->uuid, val);
        else if (!strcmp(key, "util")) g->util = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "mem_util")) g->mem_util = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "mem_used")) g->mem_used = strtoull(val, NULL, 10);
        else if (!strcmp(key, "mem_reserved")) g->mem_reserved = strtoull(val, NULL, 10);
        else if (!strcmp(key, "mem_total")) g->mem_total = strtoull(val, NULL, 10);
        else if (!strcmp(key, "temp")) g->temp = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "power_mw")) g->power_mw = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "power_limit_mw"))
            g->power_limit_mw = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "sm_clock")) g->sm_clock = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "samples_every_us")) g->every_us = strtoull(val, NULL, 10);
        else if (!strcmp(key, "samples_buffer")) g->buffer = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "samples_type")) g->sample_type = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "samples_cycle")) {
            char *p = val, *end;
            g->ncycle = 0;
            while (g->ncycle < MAX_CYCLE) {
                unsigned long long v = strtoull(p, &end, 10);
                if (end == p) break;
                g->cycle[g->ncycle++] = v;
                p = end;
            }
        } else if (!strcmp(key, "sample") && g->nsamples < MAX_SAMPLES) {
            char *rest;
            g->sample_ts[g->nsamples] = strtoull(val, &rest, 10);
            g->sample_val[g->nsamples++] = strtoull(rest, NULL, 10);
        } else if (!strcmp(key, "proc") && g->nprocs < MAX_PROCS) {
            char *rest;
            g->proc_pid[g->nprocs] = (unsigned)strtoul(val, &rest, 10);
            while (*rest == ' ' || *rest == '\t') rest++;
            g->proc_mem[g->nprocs++] = strncmp(rest, "na", 2) ? strtoull(rest, NULL, 10)
                                                               : ~0ULL;
        } else if (!strcmp(key, "ecc_mode")) g->ecc_mode = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "persistence")) g->persistence = (unsigned)strtoul(val, NULL, 10);
        else if (!strcmp(key, "retired_pending")) g->retired_pending = atoi(val);
        else if (!strcmp(key, "clock_reasons")) g->clock_reasons = strtoull(val, NULL, 0);
        else if (!strcmp(key, "ecc_uncorrected"))
            sscanf(val, "%llu %llu", &g->ecc_unc_vol, &g->ecc_unc_agg);
        else if (!strcmp(key, "ecc_corrected"))
            sscanf(val, "%llu %llu", &g->ecc_cor_vol, &g->ecc_cor_agg);
        else if (!strcmp(key, "remap"))
            sscanf(val, "%u %u %u %u", &g->remap_cor, &g->remap_unc, &g->remap_pending,
                   &g->remap_failure);
        else if (!strcmp(key, "pcie_gen")) sscanf(val, "%u %u", &g->pcie_gen, &g->pcie_gen_max);
        else if (!strcmp(key, "pcie_width"))
            sscanf(val, "%u %u", &g->pcie_width, &g->pcie_width_max);
        else if (!strcmp(key, "xid")) sscanf(val, "%llu %llu", &g->xid_value, &g->xid_count);
        else if (!strcmp(key, "error")) {
            char *code = val + strcspn(val, " \t");
            int i;
            if (*code) *code++ = 0;
            if (!strcmp(val, "all")) g->err_all = atoi(code);
            for (i = 0; i < F_N; i++)
                if (!strcmp(val, FUNC_NAMES[i])) g->err[i] = atoi(code);
        }
    }
    fclose(f);
    return 0;
}

static void reload(void) {
    static fake_state next;  /* static: the struct is large */
    if (load_state(&next) == 0) state = next;
}

/* Resolve a handle to its GPU and apply scripted errors for FUNC. */
static nvmlReturn_t check(void *device, int func, fake_gpu **out) {
    fake_gpu *g = (fake_gpu *)device;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (g < state.gpus || g >= state.gpus + state.ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->err_all) return g->err_all;
    if (g->err[func]) return g->err[func];
    *out = g;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_out(char *buf, unsigned int length, const char *value) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ---- library ---------------------------------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (load_state(&state) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (state.init_error) return state.init_error;
    initialized = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    return copy_out(version, length, state.driver);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    return copy_out(version, length, state.nvml_version);
}

/* ---- devices ---------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    reload();  /* a test may rewrite the state file while the agent runs */
    if (state.sweep_delay_ms) {
        struct timespec ts = {(time_t)(state.sweep_delay_ms / 1000),
                              (long)(state.sweep_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (state.init_error) return state.init_error;
    *count = state.ngpus;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= state.ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    if (state.gpus[index].err[F_HANDLE]) return state.gpus[index].err[F_HANDLE];
    *device = &state.gpus[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_NAME, &g);
    return r ? r : copy_out(name, length, g->name);
}

nvmlReturn_t nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_UUID, &g);
    return r ? r : copy_out(uuid, length, g->uuid);
}

/* ---- utilization samples ---------------------------------------------------------------- */

static unsigned long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

static int generated(const fake_gpu *g) {
    return g->nsamples == 0 && g->every_us > 0 && g->ncycle > 0;
}

/* The samples newer than last_seen, oldest first, at most max of them (all when out is NULL);
 * returns how many there are. Sample k of a generated stream: timestamp k*every_us, value
 * cycle[k % ncycle]. */
static unsigned int samples_since(const fake_gpu *g, unsigned long long last_seen,
                                  nvmlSample_t *out, unsigned int max) {
    unsigned int n = 0, i;
    if (generated(g)) {
        unsigned long long newest = now_us() / g->every_us, k;
        unsigned long long oldest = newest >= g->buffer ? newest - g->buffer + 1 : 0;
        if (g->buffer == 0) return 0;
        if (last_seen / g->every_us + 1 > oldest) oldest = last_seen / g->every_us + 1;
        for (k = oldest; k <= newest; k++) {
            if (out && n < max) {
                unsigned long long v = g->cycle[k % g->ncycle];
                memset(&out[n], 0, sizeof out[n]);
                out[n].timeStamp = k * g->every_us;
                if (g->sample_type == 0) out[n].sampleValue.dVal = (double)v;
                else if (g->sample_type == 1) out[n].sampleValue.uiVal = (unsigned int)v;
                else out[n].sampleValue.ullVal = v;
            }
            n++;
        }
        return n;
    }
    for (i = 0; i < g->nsamples; i++) {
        if (g->sample_ts[i] <= last_seen) continue;
        if (out && n < max) {
            memset(&out[n], 0, sizeof out[n]);
            out[n].timeStamp = g->sample_ts[i];
            if (g->sample_type == 0) out[n].sampleValue.dVal = (double)g->sample_val[i];
            else if (g->sample_type == 1) out[n].sampleValue.uiVal = (unsigned int)g->sample_val[i];
            else out[n].sampleValue.ullVal = g->sample_val[i];
        }
        n++;
    }
    return n;
}

/* nvml.h's two-call protocol: samples NULL -> *count = how many there are; otherwise up to
 * *count of them, oldest first, and *count = how many were written. None newer than
 * lastSeenTimeStamp -> NVML_ERROR_NOT_FOUND. Only GPU utilization is scripted. */
nvmlReturn_t nvmlDeviceGetSamples(void *device, int type, unsigned long long lastSeenTimeStamp,
                                  int *sampleValType, unsigned int *sampleCount,
                                  nvmlSample_t *samples) {
    fake_gpu *g;
    unsigned int n;
    nvmlReturn_t r = check(device, F_SAMPLES, &g);
    if (r) return r;
    if (!sampleValType || !sampleCount) return NVML_ERROR_INVALID_ARGUMENT;
    if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
    n = samples_since(g, lastSeenTimeStamp, NULL, 0);
    if (n == 0) return NVML_ERROR_NOT_FOUND;
    *sampleValType = (int)g->sample_type;
    if (!samples) {
        *sampleCount = n;
        return NVML_SUCCESS;
    }
    n = samples_since(g, lastSeenTimeStamp, samples, *sampleCount);  /* may have grown */
    if (n < *sampleCount) *sampleCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *device, nvmlUtilization_t *util) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_UTIL, &g);
    if (r) return r;
    if (!util) return NVML_ERROR_INVALID_ARGUMENT;
    util->gpu = generated(g) ? (unsigned int)g->cycle[(now_us() / g->every_us) % g->ncycle]
                             : g->util;
    util->memory = g->mem_util;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(void *device, nvmlMemory_t *mem) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_MEM, &g);
    if (r) return r;
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = g->mem_total;
    mem->used = g->mem_used + g->mem_reserved;  /* v1: allocated + reserved */
    mem->free = g->mem_total > mem->used ? g->mem_total - mem->used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *device, nvmlMemory_v2_t *mem) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_MEM, &g);
    if (r) return r;
    if (g->err[F_MEM_V2]) return g->err[F_MEM_V2];
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    if (mem->version != ((unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24)))
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;  /* nvmlMemory_v2 = 0x02000028 */
    mem->total = g->mem_total;
    mem->reserved = g->mem_reserved;
    mem->used = g->mem_used;
    mem->free = g->mem_total > g->mem_used + g->mem_reserved
                    ? g->mem_total - g->mem_used - g->mem_reserved : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(void *device, unsigned int sensor, unsigned int *temp) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_TEMP, &g);
    if (r) return r;
    if (!temp || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;  /* 0 = NVML_TEMPERATURE_GPU */
    *temp = g->temp;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(void *device, nvmlTemperature_t *temp) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_TEMP, &g);
    if (r) return r;
    if (!temp || temp->sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (temp->version != ((unsigned)sizeof(nvmlTemperature_t) | (1u << 24)))
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;  /* nvmlTemperature_v1 = 0x100000C */
    temp->temperature = (int)g->temp;
    return NVML_SUCCESS;
}

#define NVML_CLOCK_SM 1
nvmlReturn_t nvmlDeviceGetClockInfo(void *device, int type, unsigned int *clock) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_CLOCK_INFO, &g);
    if (r) return r;
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    if (type != NVML_CLOCK_SM || g->sm_clock == 0) return NVML_ERROR_NOT_SUPPORTED;
    *clock = g->sm_clock;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(void *device, unsigned int *power) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_POWER, &g);
    if (r) return r;
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    *power = g->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *device, unsigned int *limit) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_POWER_LIMIT, &g);
    if (r) return r;
    if (!limit) return NVML_ERROR_INVALID_ARGUMENT;
    *limit = g->power_limit_mw;
    return NVML_SUCCESS;
}

/* NVML's two-call protocol: with too small a buffer (or NULL), report the count needed and
 * return INSUFFICIENT_SIZE; with no processes, SUCCESS and count 0. */
static nvmlReturn_t running_processes(void *device, unsigned int *count,
                                      nvmlProcessInfo_t *infos, int v3) {
    fake_gpu *g;
    unsigned int i;
    nvmlReturn_t r = check(device, F_PROCS, &g);
    if (r) return r;
    if (v3 && g->err[F_PROCS_V3]) return g->err[F_PROCS_V3];
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < g->nprocs || (!infos && g->nprocs)) {
        *count = g->nprocs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i = 0; i < g->nprocs; i++) {
        infos[i].pid = g->proc_pid[i];
        infos[i].usedGpuMemory = g->proc_mem[i];
        infos[i].gpuInstanceId = 0xFFFFFFFFu;  /* not a MIG instance */
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = g->nprocs;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(device, count, infos, 1);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void *device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(device, count, infos, 0);
}

/* ---- health ------------------------------------------------------------------------------ */
#ifndef FAKE_NVML_NO_HEALTH

#define GET_UINT(func, F, expr)                                                  \
    nvmlReturn_t func(void *device, unsigned int *out) {                         \
        fake_gpu *g;                                                             \
        nvmlReturn_t r = check(device, F, &g);                                   \
        if (r) return r;                                                         \
        if (!out) return NVML_ERROR_INVALID_ARGUMENT;                            \
        *out = (expr);                                                           \
        return NVML_SUCCESS;                                                     \
    }
GET_UINT(nvmlDeviceGetCurrPcieLinkGeneration, F_PCIE, g->pcie_gen)
GET_UINT(nvmlDeviceGetMaxPcieLinkGeneration, F_PCIE, g->pcie_gen_max)
GET_UINT(nvmlDeviceGetCurrPcieLinkWidth, F_PCIE, g->pcie_width)
GET_UINT(nvmlDeviceGetMaxPcieLinkWidth, F_PCIE, g->pcie_width_max)
GET_UINT(nvmlDeviceGetPersistenceMode, F_PERSISTENCE, g->persistence)

nvmlReturn_t nvmlDeviceGetEccMode(void *device, unsigned int *current, unsigned int *pending) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_ECC_MODE, &g);
    if (r) return r;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = g->ecc_mode;
    return NVML_SUCCESS;
}

/* errorType 0 corrected, 1 uncorrected; counterType 0 volatile, 1 aggregate. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *device, int errorType, int counterType,
                                         unsigned long long *count) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_ECC_COUNT, &g);
    if (r) return r;
    if (!count || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->ecc_mode) return NVML_ERROR_NOT_SUPPORTED;  /* ECC off: no counters */
    *count = errorType ? (counterType ? g->ecc_unc_agg : g->ecc_unc_vol)
                       : (counterType ? g->ecc_cor_agg : g->ecc_cor_vol);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(void *device, unsigned int *pending) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_RETIRED, &g);
    if (r) return r;
    if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->retired_pending < 0) return NVML_ERROR_NOT_SUPPORTED;
    *pending = (unsigned)g->retired_pending;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(void *device, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_REMAP, &g);
    if (r) return r;
    if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    *corr = g->remap_cor;
    *unc = g->remap_unc;
    *pending = g->remap_pending;
    *failure = g->remap_failure;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *device, unsigned long long *reasons) {
    fake_gpu *g;
    nvmlReturn_t r = check(device, F_CLOCKS, &g);
    if (r) return r;
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = g->clock_reasons;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *device,
                                                       unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

/* ---- XID events: an event set remembers, per GPU index, how many events it delivered ---- */
typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct {
    int registered[MAX_GPUS];
    unsigned long long delivered[MAX_GPUS];
} fake_event_set;

nvmlReturn_t nvmlEventSetCreate(void **set) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(fake_event_set));
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlEventSetFree(void *set) {
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(void *device, unsigned long long types, void *set) {
    fake_gpu *g;
    fake_event_set *es = (fake_event_set *)set;
    nvmlReturn_t r = check(device, F_EVENTS, &g);
    long i;
    if (r) return r;
    if (!es) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~0x8ULL) return NVML_ERROR_NOT_SUPPORTED;  /* only XID critical errors */
    i = g - state.gpus;
    es->registered[i] = 1;
    es->delivered[i] = g->xid_count;  /* events before registration are not delivered */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeoutms) {
    fake_event_set *es = (fake_event_set *)set;
    unsigned int i;
    (void)timeoutms;  /* never blocks: a test that waits would only slow the suite */
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!es || !data) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < state.ngpus; i++) {
        if (es->registered[i] && state.gpus[i].xid_count > es->delivered[i]) {
            es->delivered[i]++;
            memset(data, 0, sizeof *data);
            data->device = &state.gpus[i];
            data->eventType = 0x8;
            data->eventData = state.gpus[i].xid_value;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_TIMEOUT;
}
nvmlReturn_t nvmlEventSetWait(void *set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

#endif /* FAKE_NVML_NO_HEALTH */
