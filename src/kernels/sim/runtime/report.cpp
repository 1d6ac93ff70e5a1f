// The simulator's reports: text helpers, the event log, the misuse / hazard / deadlock records, all JSON
// through one writer (Json below), and the C ABI pelib.sim calls (pe_sim_run, pe_sim_report_json,
// pe_sim_events, pe_sim_event_size, pe_sim_event_schema).
#include <dlfcn.h>

#include "runtime/state.h"

namespace pe_sim {
namespace {

// ---- text ---------------------------------------------------------------------------------------------
std::string fmt(const char* f, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// A JSON string literal (control characters but newline become spaces).
std::string jesc(const std::string& t) {
  std::string o = "\"";
  for (char ch : t) {
    if (ch == '"' || ch == '\\') o += '\\', o += ch;
    else if (ch == '\n') o += "\\n";
    else if ((unsigned char)ch < 0x20) o += ' ';
    else o += ch;
  }
  return o + "\"";
}

const char* short_file(const char* f) {
  if (!f) return "?";
  const char* k = std::strstr(f, "src/kernels/");
  return k ? k + 12 : f;
}

std::string where(const Fiber* f, Site s) {
  if (!f) return fmt("(engine) at %s:%d", short_file(s.file), s.line);
  const Cta* c = f->cta;
  // (the engine's own file: the thread reached no engine call yet)
  const bool started = s.file && std::strstr(s.file, "sim/runtime/");
  const std::string at = E && E->raw_pc ? (started ? std::string("@@pc@@")
                                                   : fmt("@@pc@@ (after %s:%d)", short_file(s.file), s.line))
                                        : fmt("%s:%d", short_file(s.file), s.line);
  return fmt("CTA %d (cluster %d, rank %d) warp %d lane %d [warp %d] at %s", c->id, c->cluster->id, c->rank,
             f->warp, f->lane, f->warp, at.c_str());
}

// The stage library and the offset of the instruction at pc (pelib.sim turns it into a source line).
Json pc_fields(uintptr_t pc) {
  Json o;
  Dl_info di{};
  if (pc && dladdr(reinterpret_cast<void*>(pc), &di) && di.dli_fname)
    o.put("lib", di.dli_fname).unum("pc", pc - uintptr_t(di.dli_fbase));
  return o;
}

// ---- the one JSON writer ------------------------------------------------------------------------------
std::string Json::str() const { return "{" + body_ + "}"; }

Json& Json::raw(const char* k, const std::string& json) {
  body_ += (body_.empty() ? "" : ",") + jesc(k) + ":" + json;
  return *this;
}
Json& Json::put(const char* k, const std::string& v) { return raw(k, jesc(v)); }
Json& Json::put(const char* k, const char* v) { return raw(k, jesc(v ? v : "")); }
Json& Json::put(const char* k, bool v) { return raw(k, v ? "true" : "false"); }
Json& Json::num(const char* k, long long v) { return raw(k, std::to_string(v)); }
Json& Json::unum(const char* k, unsigned long long v) { return raw(k, std::to_string(v)); }
Json& Json::merge(const Json& o) {
  if (!o.body_.empty()) body_ += (body_.empty() ? "" : ",") + o.body_;
  return *this;
}

std::string jarr(const std::vector<std::string>& items) {   // items: JSON values
  std::string o = "[";
  for (size_t i = 0; i < items.size(); ++i) o += (i ? "," : "") + items[i];
  return o + "]";
}
std::string jstrs(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (auto& s : v) q.push_back(jesc(s));
  return jarr(q);
}

// A report record: its text and the thread and source line it names (plus `extra` fields).
std::string record(const std::string& text, const Fiber* f, Site s, const Json& extra) {
  Json o;
  o.put("text", text);
  if (f) {
    const Cta* c = f->cta;
    o.num("cta", c->id).num("cluster", c->cluster->id).num("rank", c->rank).num("warp", f->warp).num("lane", f->lane);
    o.put("role", fmt("warp %d", f->warp));
  }
  o.put("file", short_file(s.file)).num("line", s.line);
  if (E && E->raw_pc) o.merge(pc_fields(E->raw_pc));
  return o.merge(extra).str();
}

// ---- misuse and hazards: the lists keep the first MAX_RECORDS, the report counts them all ---------------
void add_record(std::vector<std::string>& list, size_t& total, std::string rec) {
  ++total;
  if (list.size() < Report::MAX_RECORDS) list.push_back(std::move(rec));
}
void misuse(const std::string& what, Site s, Fiber* f) {
  Fiber* g = f ? f : E->cur;
  add_record(E->rep.misuse, E->rep.misuse_total, record(what + " — " + where(g, s), g, s));
  E->aborted = true;
}
[[noreturn]] void misuse_fatal(const std::string& what, Site s) {
  misuse(what, s);
  abort_fiber();
}
// Legal but suspicious: reported, never a reason to stop the run.
void warning(const std::string& what, Site s, Fiber* f) {
  add_record(E->rep.warnings, E->rep.warnings_total, record(what + " — " + where(f, s), f, s));
}

void deadlock_report() {
  struct Group {
    std::vector<int> lanes;
    const Fiber* f;
    Json extra;
  };
  std::map<std::string, Group> groups;   // one record per (CTA, warp, wait site), with its lanes
  for (Fiber* f : E->fibers_all) {
    if (f->state != FS::Blocked) continue;
    const WaitInfo& w = f->w;
    Cta* c = f->cta;
    std::string what;
    Json extra;
    if (w.kind == W_MBAR || w.kind == W_MBAR_TRY) {
      Cta* bc = c;
      u32 r = (w.addr >> 24) & 0xFF;
      if (r < c->cluster->ctas.size()) bc = c->cluster->ctas[r];
      Barrier* b = find_bar(bc, w.addr & 0xFFFFFF);
      what = fmt("mbarrier wait (tag %u) on the barrier at 0x%x for parity %u; %s", w.tag, w.addr & 0xFFFFFF, w.parity,
                 b ? bar_state(*b).c_str() : "no barrier initialized there");
      extra.put("wait", "mbarrier").unum("tag", w.tag).unum("barrier", w.addr & 0xFFFFFF).num("barrier_cta", bc->id);
      extra.unum("parity", w.parity);
      if (b)
        extra.unum("phase", b->phase).unum("phase_parity", b->phase & 1).num("pending", b->pending).unum("count", b->count)
            .num("tx", b->tx);
    } else if (w.kind == W_NAMED_BAR) {
      NamedBar& nb = c->nbar[w.addr];
      what = fmt("named barrier %u (bar.sync, %u threads): %u arrived", w.addr, nb.count, nb.arrived);
      extra.put("wait", "bar.sync").unum("barrier", w.addr).unum("count", nb.count).unum("arrived", nb.arrived);
    } else if (w.kind == W_WARP) {
      WarpColl& wc = c->warps[f->warp];
      what = fmt("%s: lanes 0x%08x of 0x%08x arrived (the other lanes never reach it: divergent warp)", w.what,
                 wc.arrived, wc.mask);
      extra.put("wait", w.what);
    } else if (w.kind == W_CLUSTER) {
      what = fmt("barrier.cluster.wait: %u of %d threads of the cluster arrived", c->cluster->bar_arrived,
                 c->cluster->live_threads);
      extra.put("wait", "barrier.cluster");
    } else if (w.kind == W_WGMMA) {
      what = fmt("wgmma.wait_group: %s", w.what);
      extra.put("wait", "wgmma.wait_group");
    } else if (w.kind == W_BULK) {
      what = "cp.async.bulk.wait_group";
      extra.put("wait", "cp.async.bulk.wait_group");
    } else if (w.kind == W_TMEM_ALLOC) {
      what = "tcgen05.alloc: no free TMEM columns (an earlier allocation is never freed)";
      extra.put("wait", "tcgen05.alloc");
    } else {
      what = w.what;
    }
    std::string key = fmt("CTA %d (cluster %d, rank %d) warp %d: %s at %s:%d", c->id, c->cluster->id, c->rank, f->warp,
                          what.c_str(), short_file(w.site.file), w.site.line);
    Group& g = groups[key];
    if (!g.f) g.f = f, g.extra = extra;
    g.lanes.push_back(f->lane);
  }
  for (auto& [k, g] : groups) {
    std::string l;
    std::vector<std::string> lj;
    if (g.lanes.size() == 32) l = "lanes 0-31";
    else l = "lane" + std::string(g.lanes.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < g.lanes.size(); ++i) {
      if (g.lanes.size() != 32) l += (i ? "," : "") + std::to_string(g.lanes[i]);
      lj.push_back(std::to_string(g.lanes[i]));
    }
    E->rep.deadlock.push_back(record(k + " [" + l + "]", g.f, g.f->w.site, Json(g.extra).raw("lanes", jarr(lj))));
  }
  if (E->rep.deadlock.empty())
    E->rep.deadlock.push_back(record("no fiber can run, none is blocked, and CTAs wait to start", nullptr, Site{"", 0}));
}


// The steps limit: every thread still alive and where it is.
void no_progress_report() {
  std::map<std::string, int> sites;
  for (Fiber* f : E->fibers_all)
    if (f->state != FS::Done) {
      const Site& s = f->state == FS::Blocked ? f->w.site : f->site;
      sites[fmt("CTA %d warp %d %s at %s:%d", f->cta->id, f->warp, f->state == FS::Blocked ? "blocked" : "runnable",
                short_file(s.file), s.line)]++;
    }
  // not a deadlock: runnable threads were cut short; the record says which knob did it
  for (auto& [k, n] : sites)
    E->rep.deadlock.push_back(record(fmt("stopped at the step limit (PELIB_SIM_MAX_STEPS=%llu) with %s (%d threads): "
                                         "raise PELIB_SIM_MAX_STEPS (0: no limit) if the run needs more steps",
                                         (unsigned long long)E->L.max_steps, k.c_str(), n), nullptr, Site{"", 0},
                                     Json().put("wait", "step limit")));
}

// Per tensor the kernel was given, the bytes of its own global loads and stores and of its L2 prefetches'
// boxes (Engine::gload / gstore / gprefetch).
std::string gmem_json() {
  std::string out = "[";
  for (size_t i = 0; i < E->tensors.size(); ++i) {
    if (i) out += ",";
    Json t;
    t.put("tensor", E->tensors[i].name ? E->tensors[i].name : "");
    t.unum("load", i < E->gload.size() ? E->gload[i] : 0).unum("store", i < E->gstore.size() ? E->gstore[i] : 0);
    t.unum("prefetch", i < E->gprefetch.size() ? E->gprefetch[i] : 0);
    out += t.str();
  }
  return out + "]";
}

std::string report_json(bool ok) {
  Json o;
  o.put("ok", ok).raw("deadlock", jarr(E->rep.deadlock)).raw("hazards", jarr(E->rep.hazards));
  o.raw("misuse", jarr(E->rep.misuse)).unum("hazards_total", E->rep.hazards_total);
  o.raw("warnings", jarr(E->rep.warnings)).unum("warnings_total", E->rep.warnings_total);
  o.unum("misuse_total", E->rep.misuse_total).unum("records_cap", Report::MAX_RECORDS);
  o.raw("files", jstrs(E->files)).raw("names", jstrs(E->names)).raw("roles", roles_json()).put("events_truncated", E->events_truncated).unum("steps", E->steps);
  o.raw("gmem", gmem_json());
  o.unum("switches", E->switches).unum("ops", E->ops_done).num("p_async", E->p_async).num("p_yield", E->p_yield);
  return o.str();
}

}  // namespace
}  // namespace pe_sim

// ====================================================================================================
// C ABI for pelib.sim
// ====================================================================================================
extern "C" {
// Run one launch. Returns 0 when the kernel ran to the end without a report, 1 otherwise (see the report).
int pe_sim_run(const PeSimLaunch* L) {
  using namespace pe_sim;
  run_launch(L);
  finalize_events();
  const bool ok = E->rep.deadlock.empty() && E->rep.hazards.empty() && E->rep.misuse.empty();
  E->report_json = report_json(ok);
  return ok ? 0 : 1;
}

const char* pe_sim_report_json() { return pe_sim::E ? pe_sim::E->report_json.c_str() : "{}"; }

const PeSimEvent* pe_sim_events(int64_t* n) {
  *n = pe_sim::E ? int64_t(pe_sim::E->events.size()) : 0;
  return pe_sim::E ? pe_sim::E->events.data() : nullptr;
}

int pe_sim_event_size() { return int(sizeof(PeSimEvent)); }

// The event vocabulary (state.h's two lists): {"size", "kinds": [names in enum order], "fields": [{"name",
// "offset", "type"}]}; pelib.sim builds EVENT_DTYPE and EVENT_KINDS from it.
const char* pe_sim_event_schema() {
  static std::string out;
  if (out.empty()) {
    std::string kinds, fields;
#define PE_EV_KIND(e, name) kinds += std::string(kinds.empty() ? "" : ", ") + "\"" name "\"";
    PE_SIM_EVENT_KINDS(PE_EV_KIND)
#undef PE_EV_KIND
#define PE_EV_FIELD(type, name, np)                                                                              \
  fields += std::string(fields.empty() ? "" : ", ") + "{\"name\": \"" #name "\", \"offset\": " +                \
            std::to_string(offsetof(PeSimEvent, name)) + ", \"type\": \"" np "\"}";
    PE_SIM_EVENT_FIELDS(PE_EV_FIELD)
#undef PE_EV_FIELD
    out = "{\"size\": " + std::to_string(sizeof(PeSimEvent)) + ", \"kinds\": [" + kinds + "], \"fields\": [" +
          fields + "]}";
  }
  return out.c_str();
}

uint64_t pe_sim_max_ctas() { return pe_sim::PE_SIM_MAX_CTAS; }

}  // extern "C"