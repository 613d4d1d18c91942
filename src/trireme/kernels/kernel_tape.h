// The recording hook at the one place every kernel is called: find_kernel returns a KernelCall,
// which runs the kernel directly, or, while a tape is active on this thread (graph/trace.h),
// hands the tape a description of the call (op, kernel, tensor arguments, host arguments by value)
// and a way to call it again on other tensors. Ops, the autograd engine's arithmetic, optimizers
// and collectives' arithmetic all call kernels this way, so a tape sees the whole step without
// any of them knowing.
//
// Host arguments are copied into the call's record. Those that change from step to step are made
// inputs of the recording explicitly: refresh_next_call (the caller recomputes the arguments of
// the kernel call it is about to make, before every replay: AdamW's learning rate and bias
// corrections), bind_u64 (every recorded uint64 argument equal to a value, e.g. a dropout stream,
// is recomputed before every replay) and on_replay (host side effects the step has besides its
// kernels, e.g. the optimizer's step count).
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme {

// One kernel call as a tape receives it.
struct KernelCallRecord {
  std::string_view op;
  Device device;
  DType dtype = DType::f32;
  std::type_index kernel_type = std::type_index(typeid(void));
  void (*kernel)() = nullptr;                  // the kernel, for identity (CSE)
  std::vector<const Tensor*> tensors;          // the tensor arguments, in order
  std::vector<bool> written;                   // per tensor argument: passed as Tensor& (an output)
  std::string attrs;                           // the host arguments' bytes, when comparable
  bool attrs_comparable = true;
  bool pinned = false;  // a pass may not move the call, nor any call across it (graph.h: Node::pinned)
  bool recomputed = false;  // computes again what an earlier call computed (graph.h: Node::recomputed)
  std::shared_ptr<void> args;                  // the stored arguments (KernelArgs<Fn>)
  std::vector<uint64_t*> u64_args;             // the uint64 host arguments, inside `args`
  std::function<void(void* args, Tensor* const* tensors)> invoke;  // calls the kernel again
};

class KernelTape {
 public:
  virtual ~KernelTape() = default;
  // Records a call the caller is about to run (between begin and end, the kernel itself runs:
  // nested kernel calls from inside a kernel are its own business and are not recorded).
  // Returns false when the tape keeps the call to run it later itself (kernels/deferred_kernels.h),
  // and the caller does not run it; a call without a kernel (a collective) always runs now.
  virtual bool record(KernelCallRecord call) = 0;
  virtual void begin_kernel() = 0;
  virtual void end_kernel() = 0;
  virtual bool in_kernel() const = 0;
  virtual void refresh_next_call(std::type_index kernel_type, std::function<void(void* args)> refresh) = 0;
  virtual void bind_u64(uint64_t traced_value, std::function<uint64_t()> value_now) = 0;
  virtual void on_replay(std::function<void()> host_step) = 0;
  // Whether the calls are recorded to run again (a trace), rather than only watched.
  virtual bool records_for_replay() const { return true; }
};

// This thread's tape (null unless a trace is running).
KernelTape*& active_kernel_tape();

// While alive, the kernel calls this thread makes compute again what earlier calls computed (a
// checkpointed region's replay, a selective recomputation's recipe): their records say so
// (KernelCallRecord::recomputed), so that a traced step keeps them apart from the first calls.
class RecomputationScope {
 public:
  RecomputationScope() { ++depth(); }
  ~RecomputationScope() { --depth(); }
  RecomputationScope(const RecomputationScope&) = delete;
  RecomputationScope& operator=(const RecomputationScope&) = delete;
  static bool active() { return depth() > 0; }

 private:
  static int& depth();
};

// A tape that only watches: installed on this thread while alive, it shows each call that is
// about to run to observe() and lets it run (counting calls, summing their FLOPs). Not for use
// inside a trace, whose tape it would hide.
class ObservingKernelTape : public KernelTape {
 public:
  ObservingKernelTape() : outer_(active_kernel_tape()) { active_kernel_tape() = this; }
  ~ObservingKernelTape() override { active_kernel_tape() = outer_; }
  ObservingKernelTape(const ObservingKernelTape&) = delete;
  ObservingKernelTape& operator=(const ObservingKernelTape&) = delete;

  bool record(KernelCallRecord call) final {
    observe(call);
    return true;
  }
  void begin_kernel() final { ++depth_; }
  void end_kernel() final { --depth_; }
  bool in_kernel() const final { return depth_ > 0; }
  void refresh_next_call(std::type_index, std::function<void(void*)>) final {}
  void bind_u64(uint64_t, std::function<uint64_t()>) final {}
  void on_replay(std::function<void()>) final {}
  bool records_for_replay() const final { return false; }

 protected:
  virtual void observe(const KernelCallRecord& call) = 0;

 private:
  KernelTape* outer_;
  int depth_ = 0;
};

template <class A>
inline constexpr bool is_tensor_arg_v = std::is_same_v<std::remove_cvref_t<A>, Tensor>;
// A kernel's arguments as a tape stores them: tensors as their index among the call's tensor
// arguments, everything else by value.
template <class A>
using stored_kernel_arg_t = std::conditional_t<is_tensor_arg_v<A>, int, std::remove_cvref_t<A>>;

template <class Fn>
struct KernelSignature;
template <class... Args>
struct KernelSignature<void (*)(Args...)> {
  using Stored = std::tuple<stored_kernel_arg_t<Args>...>;
};
template <class Fn>
using KernelArgs = typename KernelSignature<Fn>::Stored;

// What find_kernel returns: the kernel, called like it.
template <class Fn>
class KernelCall;

template <class... Args>
class KernelCall<void (*)(Args...)> {
 public:
  using Fn = void (*)(Args...);
  using Stored = std::tuple<stored_kernel_arg_t<Args>...>;

  KernelCall(Fn fn, std::string_view op, Device device, DType dtype) : fn_(fn), op_(op), device_(device), dtype_(dtype) {}

  void operator()(Args... args) const {
    KernelTape* tape = active_kernel_tape();
    if (tape == nullptr || tape->in_kernel()) [[likely]] {
      fn_(static_cast<Args>(args)...);
      return;
    }
    if (!record(*tape, args...)) return;  // the tape runs it later, or never
    tape->begin_kernel();
    struct End {
      KernelTape* t;
      ~End() { t->end_kernel(); }
    } end{tape};
    fn_(static_cast<Args>(args)...);
  }

  Fn get() const { return fn_; }

 private:
  template <class A>
  static stored_kernel_arg_t<A> store(A arg, KernelCallRecord& r) {
    if constexpr (is_tensor_arg_v<A>) {
      r.tensors.push_back(&arg);
      r.written.push_back(!std::is_const_v<std::remove_reference_t<A>>);
      return int(r.tensors.size() - 1);
    } else {
      using T = std::remove_cvref_t<A>;
      if constexpr (std::is_trivially_copyable_v<T> && std::has_unique_object_representations_v<T>) {
        r.attrs.append(reinterpret_cast<const char*>(&arg), sizeof(T));
      } else if constexpr (std::is_floating_point_v<T>) {
        r.attrs.append(reinterpret_cast<const char*>(&arg), sizeof(T));  // bit-exact comparison
      } else if constexpr (std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>) {
        r.attrs.append(reinterpret_cast<const char*>(&arg), sizeof(T));  // structs of scalars without padding
        static_assert(sizeof(T) % 8 == 0, "a kernel's struct argument must have no padding to be recorded");
      } else {
        r.attrs_comparable = false;
      }
      return arg;
    }
  }

  template <class A, class S>
  static decltype(auto) load(S& s, Tensor* const* tensors) {
    if constexpr (is_tensor_arg_v<A>) {
      return static_cast<A>(*tensors[s]);
    } else {
      return static_cast<const S&>(s);
    }
  }

  template <size_t... I>
  static void call(Fn fn, Stored& a, Tensor* const* tensors, std::index_sequence<I...>) {
    fn(load<std::tuple_element_t<I, std::tuple<Args...>>>(std::get<I>(a), tensors)...);
  }

  template <size_t... I>
  static void collect_u64(Stored& a, std::vector<uint64_t*>& out, std::index_sequence<I...>) {
    ((std::is_same_v<std::tuple_element_t<I, Stored>, uint64_t> ? out.push_back(reinterpret_cast<uint64_t*>(&std::get<I>(a)))
                                                                  : void()),
     ...);
  }

  bool record(KernelTape& tape, Args... args) const {
    KernelCallRecord r;
    r.op = op_;
    r.device = device_;
    r.dtype = dtype_;
    r.kernel_type = std::type_index(typeid(Fn));
    r.kernel = reinterpret_cast<void (*)()>(fn_);
    r.recomputed = RecomputationScope::active();
    auto stored = std::make_shared<Stored>(Stored{store<Args>(args, r)...});  // braces: left to right
    collect_u64(*stored, r.u64_args, std::index_sequence_for<Args...>{});
    r.args = stored;
    r.invoke = [fn = fn_](void* a, Tensor* const* tensors) {
      call(fn, *static_cast<Stored*>(a), tensors, std::index_sequence_for<Args...>{});
    };
    return tape.record(std::move(r));
  }

  Fn fn_;
  std::string_view op_;
  Device device_;
  DType dtype_;
};

// Makes the arguments of the next kernel call of type Fn on this thread's tape inputs of the
// recording: `refresh` recomputes them before every replay. A no-op when nothing is traced.
template <class Fn, class Refresh>
void refresh_next_kernel_call(Refresh refresh) {
  if (KernelTape* tape = active_kernel_tape(); tape && !tape->in_kernel()) {
    tape->refresh_next_call(std::type_index(typeid(Fn)),
                            [refresh = std::move(refresh)](void* a) { refresh(*static_cast<KernelArgs<Fn>*>(a)); });
  }
}

}  // namespace trireme
