/* Libraries whose entry or table would crash a runtime that trusts them, one way each, selected by
 * the macro the build defines. They live in their own directory (tests/plugins-broken): a run that
 * searches it but names none of them must not notice them. */
#include <loom/plugin.h>
#include <stddef.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h;
  (void)o;
  (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }

/* A precision named like the built-in one, not exact, with no way to round an operand. */
static const loom_precision_v2 impostor = {
    .base = {.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_precision_v2)},
             .kind = LOOM_KIND_PRECISION,
             .name = "fp32",
             .version = "6.6.6",
             .summary = "an fp32 impostor whose functions are all NULL",
             .create = create,
             .destroy = destroy},
    .compute_dtype = LOOM_F32,
    .exact = 0};
static const loom_plugin* const list[] = {&impostor.base};

LOOM_EXPORT loom_status loom_plugin_entry_v3(const loom_host* host, const loom_plugin* const** out,
                                             size_t* count, loom_error* err) {
  (void)host;
  (void)err;
#if defined(LOOM_TEST_NULL_LIST)
  *out = NULL; /* says one plugin, hands over none */
  *count = 1;
#elif defined(LOOM_TEST_ENTRY_FAULTS)
  volatile int* nowhere = NULL;
  *nowhere = 1; /* SIGSEGV */
  *out = list;
  *count = 1;
#else
  *out = list;
  *count = 1;
#endif
  return LOOM_OK;
}
