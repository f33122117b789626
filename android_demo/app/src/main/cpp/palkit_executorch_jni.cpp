// JNI for io.palkit.demo.runtime.ExecuTorchProgram: one task program (.pte) whose trunk weights
// live in a shared data file (.ptd). Plain JNI, no fbjni, so the Java side stays tiny.
//
// The same file is built for the phone (CMakeLists.txt here, ExecuTorch from source) and for the
// host tests (android_demo/host/native_host.py, against the executorch wheel's C++ SDK).
#include <jni.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>

#if __has_include(<executorch/extension/threadpool/threadpool.h>)
#include <executorch/extension/threadpool/threadpool.h>
#else
// The executorch wheel's SDK ships libexecutorch_threadpool.so but not this header (nor the
// pthreadpool.h it includes). Declare the functions this file calls with the header's
// signatures; they link to the library's real symbols. ThreadPool is only used through the
// pointer the library returns, never constructed or sized here, so no other member is needed.
// The Android build has the header.
namespace executorch::extension::threadpool {
class ThreadPool final {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool
#endif

using executorch::extension::Module;
using executorch::extension::from_blob;
using executorch::runtime::Error;

namespace {

std::string toString(JNIEnv* env, jstring s) {
  const char* chars = env->GetStringUTFChars(s, nullptr);
  std::string out(chars);
  env->ReleaseStringUTFChars(s, chars);
  return out;
}

void throwRuntime(JNIEnv* env, const std::string& message) {
  env->ThrowNew(env->FindClass("java/lang/IllegalStateException"), message.c_str());
}

std::string describe(Error error) {
  return std::string(executorch::runtime::to_string(error)) + " (" +
         std::to_string(static_cast<int>(error)) + ")";
}

// Every task program packs the same trunk weights for XNNPACK. With XNNPACK's weight cache (off
// by default in ExecuTorch 1.5.1) they are packed once, keyed by their name in trunk.ptd, and
// shared by all programs: measured on a computer with MiniLM int8, three tasks resident took
// 114 MB without it and 93 MB with it (android_demo/README.md).
Error shareTrunkWeights() {
  executorch::runtime::BackendOptions<1> options;
  options.set_option("weight_cache_enabled", true);  // XNNPACK's weight_cache_option_key
  return executorch::runtime::set_option("XnnpackBackend", options.view());
}

// ExecuTorch's thread pool is one per process, and every XNNPACK delegate keeps the raw pthreadpool
// it was loaded with: resizing the pool (which frees the old one) while a program is loaded would
// leave that program running on freed memory. So the pool is resized only while no program is
// loaded, and a program asking for another size while others are loaded is refused; the app
// closes its programs before the benchmark asks for its thread count (BundleSession.kt).
std::mutex poolMutex;
size_t programsOnPool = 0;

// Takes the pool for one program about to load, at `threads` threads (0: the pool's size when
// this library first used it, i.e. ExecuTorch's default). False, with a Java exception pending,
// when programs loaded at another size still hold the pool.
bool holdThreadPool(JNIEnv* env, jint threads) {
  namespace tp = executorch::extension::threadpool;
  std::lock_guard<std::mutex> lock(poolMutex);
  tp::ThreadPool* pool = tp::get_threadpool();
  if (pool == nullptr) {
    throwRuntime(env, "ExecuTorch could not create its thread pool");
    return false;
  }
  static const size_t defaultThreads = pool->get_thread_count();
  const size_t wanted = threads > 0 ? static_cast<size_t>(threads) : defaultThreads;
  const size_t current = pool->get_thread_count();
  if (programsOnPool > 0 && wanted != current) {
    throwRuntime(env, "cannot run ExecuTorch on " + std::to_string(wanted) + " threads while " +
                          std::to_string(programsOnPool) + " program(s) loaded on " +
                          std::to_string(current) + " threads are open: close them first");
    return false;
  }
  if (programsOnPool == 0) {  // nothing holds the pool: resizing it frees nobody's pool
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    pool->_unsafe_reset_threadpool(static_cast<uint32_t>(wanted));  // same size: a no-op
#pragma GCC diagnostic pop
  }
  ++programsOnPool;
  return true;
}

void releaseThreadPool() {
  std::lock_guard<std::mutex> lock(poolMutex);
  --programsOnPool;
}

std::vector<int64_t> toVector(JNIEnv* env, jlongArray array) {
  std::vector<int64_t> out(env->GetArrayLength(array));
  env->GetLongArrayRegion(array, 0, static_cast<jsize>(out.size()),
                          reinterpret_cast<jlong*>(out.data()));
  return out;
}

}  // namespace

extern "C" JNIEXPORT jlong JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeLoad(
    JNIEnv* env, jclass, jstring programPath, jstring dataPath, jint threads) {
  if (!holdThreadPool(env, threads)) {
    return 0;
  }
  static const Error shared = shareTrunkWeights();  // once, before the first program loads
  if (shared != Error::Ok) {
    releaseThreadPool();
    throwRuntime(env, "ExecuTorch refused XNNPACK's weight_cache_enabled option: " +
                          describe(shared));
    return 0;
  }
  const std::string program = toString(env, programPath);
  const std::string data = toString(env, dataPath);
  // Mmap: the trunk file is mapped, not copied, so every task program shares its pages.
  auto module = std::make_unique<Module>(program, std::vector<std::string>{data},
                                         Module::LoadMode::Mmap);
  const Error error = module->load_method("forward");
  if (error != Error::Ok) {
    module.reset();  // before the pool is let go: its delegates may hold the pool
    releaseThreadPool();
    throwRuntime(env, "ExecuTorch could not load forward() of " + program + " with " + data +
                          ": " + describe(error) +
                          " (a truncated file, or a program exported with another trunk?)");
    return 0;
  }
  return reinterpret_cast<jlong>(module.release());
}

extern "C" JNIEXPORT jfloatArray JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeForward(
    JNIEnv* env, jclass, jlong handle, jlongArray inputIds, jlongArray attentionMask,
    jlongArray tokenTypeIds) {
  auto* module = reinterpret_cast<Module*>(handle);
  std::vector<int64_t> ids = toVector(env, inputIds);
  std::vector<int64_t> mask = toVector(env, attentionMask);
  std::vector<int64_t> types = toVector(env, tokenTypeIds);
  if (mask.size() != ids.size() || types.size() != ids.size()) {
    throwRuntime(env, "input_ids, attention_mask and token_type_ids differ in length");
    return nullptr;
  }
  const auto seq = static_cast<executorch::aten::SizesType>(ids.size());
  // Input order is the manifest's io.inputs order: input_ids, attention_mask, token_type_ids.
  auto result = module->forward({
      from_blob(ids.data(), {1, seq}, executorch::aten::ScalarType::Long),
      from_blob(mask.data(), {1, seq}, executorch::aten::ScalarType::Long),
      from_blob(types.data(), {1, seq}, executorch::aten::ScalarType::Long),
  });
  if (!result.ok()) {
    throwRuntime(env, "ExecuTorch forward failed with " + std::to_string(ids.size()) +
                          " tokens: " + describe(result.error()));
    return nullptr;
  }
  if (result->empty() || !result->at(0).isTensor() ||
      result->at(0).toTensor().scalar_type() != executorch::aten::ScalarType::Float) {
    throwRuntime(env, "the program's first output is not a float tensor of logits");
    return nullptr;
  }
  const auto& logits = result->at(0).toTensor();
  jfloatArray out = env->NewFloatArray(static_cast<jsize>(logits.numel()));
  env->SetFloatArrayRegion(out, 0, static_cast<jsize>(logits.numel()),
                           logits.const_data_ptr<float>());
  return out;
}

extern "C" JNIEXPORT void JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeFree(JNIEnv*, jclass, jlong handle) {
  delete reinterpret_cast<Module*>(handle);
  releaseThreadPool();
}
