// verbs-random-walk: a seeded random walk over the verbs API (walk.h says
// what it checks). It links against the system libibverbs and runs on
// whatever libibverbs.so.1 the loader gives it: on the simulator with
// LD_LIBRARY_PATH=build/sim.
//
// The run is a sequence of walks (seeds S, S+1, ...); each runs in a child
// process, so that a crash is reported with the step that caused it, and the
// parent kills a child that stops making progress (a hang). Any failure
// prints the seed, the step, the verb and a command that replays it.
//
//   verbs-random-walk [--seed N] [--steps N | --seconds S] [--walk-steps N]
//                     [--hang-seconds S] [--device NAME] [--no-fork]

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "progress.h"
#include "sim_control.h"
#include "walk.h"

namespace verbs_fuzz {
namespace {

struct Options {
  uint64_t seed = 0;
  uint64_t steps = 0;  // 0: unbounded (then --seconds bounds the run)
  double seconds = 0;
  uint64_t walk_steps = 1000;
  double hang_seconds = 20;
  std::string device;
  bool fork = true;
};

[[noreturn]] void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--seed N] [--steps N | --seconds S] [--walk-steps N] [--hang-seconds S]\n"
               "          [--device NAME] [--no-fork]\n",
               argv0);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  bool seeded = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage(argv[0]);
      return argv[++i];
    };
    if (arg == "--seed") {
      o.seed = std::strtoull(value(), nullptr, 0);
      seeded = true;
    } else if (arg == "--steps") {
      o.steps = std::strtoull(value(), nullptr, 0);
    } else if (arg == "--seconds") {
      o.seconds = std::strtod(value(), nullptr);
    } else if (arg == "--walk-steps") {
      o.walk_steps = std::strtoull(value(), nullptr, 0);
    } else if (arg == "--hang-seconds") {
      o.hang_seconds = std::strtod(value(), nullptr);
    } else if (arg == "--device") {
      o.device = value();
    } else if (arg == "--no-fork") {
      o.fork = false;
    } else {
      Usage(argv[0]);
    }
  }
  if (o.walk_steps == 0) Usage(argv[0]);
  if (o.steps == 0 && o.seconds <= 0) o.steps = o.walk_steps;
  if (!seeded) {
    o.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) ^
             (static_cast<uint64_t>(getpid()) << 32);
    o.seed %= 1000000000;
  }
  return o;
}

// The simulator's scheduler seed of a walk: SIMVERBS_SEED if given (every
// walk then starts from it), else the walk's own seed.
unsigned long long SimSeed(uint64_t walk_seed) {
  const char* env = std::getenv("SIMVERBS_SEED");
  return env && *env ? std::strtoull(env, nullptr, 0) : walk_seed;
}

void PrintReplay(const char* argv0, const Options& o, const Progress& p, uint64_t walk_steps) {
  // Replaying the steps up to the failing one is enough, unless it failed
  // in the final drain, which needs the whole walk.
  const uint64_t steps = p.draining ? walk_steps : p.step + 1;
  std::string env = "SIMVERBS_SEED=" + std::to_string(SimSeed(p.seed));
  for (const char* name : {"SIMVERBS_PROFILE", "LD_LIBRARY_PATH"}) {
    if (const char* value = std::getenv(name)) env += std::string(" ") + name + "=" + value;
  }
  // One walk of that many steps.
  const std::string walk = steps > Options().walk_steps ? " --walk-steps " + std::to_string(steps) : "";
  std::fprintf(stderr, "verbs-random-walk: replay: %s %s --seed %" PRIu64 " --steps %" PRIu64 "%s%s%s\n", env.c_str(),
               argv0, p.seed.load(), steps, walk.c_str(), o.device.empty() ? "" : " --device ", o.device.c_str());
}

// A child killed mid-walk leaves its part of the simulator's fabric to the
// next process that opens a device: this one, which then leaves cleanly.
void Sweep(const Options& o) {
  const pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; ++i) {
      if (!o.device.empty() && o.device != ibv_get_device_name(list[i])) continue;
      if (ibv_context* ctx = ibv_open_device(list[i])) ibv_close_device(ctx);
      break;
    }
    if (list) ibv_free_device_list(list);
    std::exit(0);
  }
  if (pid > 0) waitpid(pid, nullptr, 0);
}

enum class Outcome { kPassed, kFailed };

Outcome RunWalk(const char* argv0, const Options& o, uint64_t seed, uint64_t steps, Progress* progress) {
  new (progress) Progress();
  progress->seed = seed;
  Walk::Config config;
  config.seed = seed;
  config.steps = steps;
  config.device = o.device;
  config.sim_seed = SimSeed(seed);
  if (!o.fork) {
    Walk walk(config, progress);
    walk.Run();  // a failure exits
    return Outcome::kPassed;
  }
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("verbs-random-walk: fork");
    std::exit(2);
  }
  if (pid == 0) {
    {
      Walk walk(config, progress);
      walk.Run();
    }
    progress->Enter("exit");
    std::exit(0);  // runs the library's exit handlers: the fabric is left cleanly
  }
  // The watchdog: a walk whose heartbeat stops for hang_seconds is hung.
  uint64_t beat = progress->heartbeat.load();
  auto last_change = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Outcome::kPassed;
      // The walk said what failed (a leak checker at exit may change the status).
      if (progress->failed) {
        PrintReplay(argv0, o, *progress, steps);
        return Outcome::kFailed;
      }
      if (WIFEXITED(status)) {
        std::fprintf(stderr,
                     "verbs-random-walk: FAILED at seed %" PRIu64 " step %" PRIu64 ": exited with status %d in %s\n",
                     seed, progress->step.load(), WEXITSTATUS(status), progress->verb);
      } else {
        std::fprintf(stderr, "verbs-random-walk: FAILED at seed %" PRIu64 " step %" PRIu64 "%s: %s in %s\n", seed,
                     progress->step.load(), progress->draining ? " (final drain)" : "", strsignal(WTERMSIG(status)),
                     progress->verb);
      }
      Sweep(o);
      PrintReplay(argv0, o, *progress, steps);
      return Outcome::kFailed;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress->heartbeat.load() != beat) {
      beat = progress->heartbeat.load();
      last_change = now;
    } else if (now - last_change > std::chrono::duration<double>(o.hang_seconds)) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      if (!progress->failed) {
        std::fprintf(
            stderr, "verbs-random-walk: FAILED at seed %" PRIu64 " step %" PRIu64 "%s: no progress for %g s in %s\n",
            seed, progress->step.load(), progress->draining ? " (final drain)" : "", o.hang_seconds, progress->verb);
      }
      Sweep(o);
      PrintReplay(argv0, o, *progress, steps);
      return Outcome::kFailed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// On the simulator with a fabric of our own: nothing of it may be left in
// /dev/shm once every process has left.
bool FabricLeftovers() {
  const char* fabric = std::getenv("SIMVERBS_FABRIC");
  if (!SimControl().available() || !fabric || !*fabric) return false;
  const std::string prefix = "simverbs-" + std::to_string(getuid()) + "-" + fabric;
  bool found = false;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == prefix || name.rfind(prefix + "-", 0) == 0) {
        std::fprintf(stderr, "verbs-random-walk: FAILED: /dev/shm/%s is left after the run\n", name.c_str());
        found = true;
      }
    }
    closedir(dir);
  }
  return found;
}

int Main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  auto* progress = static_cast<Progress*>(
      mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (progress == MAP_FAILED) {
    std::perror("verbs-random-walk: mmap");
    return 2;
  }
  std::fprintf(stderr, "verbs-random-walk: seed %" PRIu64 ", %s\n", o.seed,
               o.steps ? (std::to_string(o.steps) + " steps").c_str()
                       : (std::to_string(static_cast<int>(o.seconds)) + " s").c_str());
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  uint64_t total = 0;
  uint64_t walks = 0;
  for (;;) {
    if (o.steps && total >= o.steps) break;
    if (o.seconds > 0 && elapsed() >= o.seconds) break;
    const uint64_t steps = o.steps ? std::min(o.walk_steps, o.steps - total) : o.walk_steps;
    const uint64_t seed = o.seed + walks;
    const Outcome outcome = RunWalk(argv[0], o, seed, steps, progress);
    total += progress->steps_done;
    ++walks;
    if (outcome == Outcome::kFailed) return 1;
  }
  const double secs = elapsed();
  std::printf("verbs-random-walk: %" PRIu64 " steps in %" PRIu64 " walks (seeds %" PRIu64 "..%" PRIu64
              ") in %.1f s: %.0f steps/s\n",
              total, walks, o.seed, o.seed + walks - 1, secs, secs > 0 ? static_cast<double>(total) / secs : 0.0);
  // Without children this process is still on the fabric.
  return o.fork && FabricLeftovers() ? 1 : 0;
}

}  // namespace
}  // namespace verbs_fuzz

int main(int argc, char** argv) { return verbs_fuzz::Main(argc, argv); }
