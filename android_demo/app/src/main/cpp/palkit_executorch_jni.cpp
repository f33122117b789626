// JNI for io.palkit.demo.runtime.ExecuTorchProgram: the bundle's one program (.pte) with its trunk
// weights in a data file (.ptd); a task is a weights file (safetensors) whose tensors are the
// method's task inputs. Binding a task reads its file once; each call then passes those tensors,
// which the program reads in place (its inputs are not memory-planned), so nothing is copied per
// call. Plain JNI, no fbjni, so the Java side stays tiny.
//
// The same file is built for the phone (CMakeLists.txt here, ExecuTorch from source) and for the
// host tests (android_demo/host/native_host.py, against the executorch wheel's C++ SDK).
#include <jni.h>

#include <cstdint>
#include <cstring>
#include <fstream>
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
using executorch::extension::TensorPtr;
using executorch::extension::from_blob;
using executorch::extension::make_tensor_ptr;
using executorch::runtime::EValue;
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

// The bundle's program and the method that runs one task.
struct Program {
  std::unique_ptr<Module> module;
  std::string method;
};

// One task's weights, read from its file once, in the method's input order.
struct TaskWeights {
  std::vector<TensorPtr> tensors;
};

// The value of `"key":` inside one safetensors header entry (a flat JSON object); empty if absent.
std::string field(const std::string& entry, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  size_t at = entry.find(quoted);
  if (at == std::string::npos || (at = entry.find(':', at + quoted.size())) == std::string::npos) {
    return "";
  }
  const size_t start = entry.find_first_not_of(' ', at + 1);
  if (start == std::string::npos) return "";
  size_t end = entry[start] == '[' ? entry.find(']', start) : entry.find_first_of(",}", start);
  if (end != std::string::npos && entry[start] == '[') end++;
  return entry.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  const char* p = list.c_str();
  while (*p) {
    if (*p >= '0' && *p <= '9') {
      char* end;
      out.push_back(std::strtoll(p, &end, 10));
      p = end;
    } else {
      ++p;
    }
  }
  return out;
}

// One tensor of a safetensors file: its dtype ("F32", "I8"), shape and bytes in the file.
struct Entry {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t count = 1;
  uint64_t begin = 0, bytes = 0;
};

// The header entry of tensor `name`, with its data span checked to lie inside the file and to
// hold `count` elements of its dtype (4 bytes for F32, 1 for I8; others refused).
bool findEntry(const std::string& path, const std::string& json, uint64_t data, uint64_t size,
               const std::string& name, Entry& out, std::string& error) {
  const size_t at = json.find("\"" + name + "\":");
  if (at == std::string::npos) {
    error = path + ": has no tensor '" + name + "'";
    return false;
  }
  const size_t close = json.find('}', at);
  const std::string entry = json.substr(at, close - at);
  const std::string dtype = field(entry, "dtype");
  out.dtype = dtype.find("\"F32\"") != std::string::npos  ? "F32"
              : dtype.find("\"I8\"") != std::string::npos ? "I8"
                                                            : "";
  out.shape = numbers(field(entry, "shape"));
  const std::vector<int64_t> span = numbers(field(entry, "data_offsets"));
  for (int64_t d : out.shape) out.count *= d;
  const int64_t width = out.dtype == "F32" ? 4 : 1;
  if (out.dtype.empty() || span.size() != 2 || span[1] < span[0] || data + span[1] > size ||
      span[1] - span[0] != out.count * width) {
    error = path + ": tensor '" + name +
            "' is not float32 or int8 data of its shape inside the file";
    return false;
  }
  out.begin = data + span[0];
  out.bytes = span[1] - span[0];
  return true;
}

bool readBytes(std::ifstream& in, const Entry& entry, void* into) {
  return static_cast<bool>(in.seekg(static_cast<std::streamoff>(entry.begin))
                               .read(static_cast<char*>(into),
                                     static_cast<std::streamsize>(entry.bytes)));
}

// A task's safetensors file (8-byte little-endian header size, a JSON header, the data): the
// tensors `names`, in that order, as float32. An int8 bundle stores each matrix as I8 with one
// F32 scale per output column (its last dimension) in `<name>.scale`; it is dequantized here,
// once, as w = q * scale: the formula of palkit's Python runtime (runtime/runners.py
// read_task_weights), so the method gets the same bits from both. Sets `error` and returns false
// for anything else.
bool readTaskWeights(const std::string& path, const std::vector<std::string>& names,
                     TaskWeights& out, std::string& error) {
  // Each tensor is read from the file straight into its own buffer: no file image.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const uint64_t size = in ? static_cast<uint64_t>(in.tellg()) : 0;
  uint64_t header = 0;
  if (size < 8 || !in.seekg(0).read(reinterpret_cast<char*>(&header), 8)) {
    error = path + ": too short for a safetensors file";
    return false;
  }
  if (header > size - 8) {
    error = path + ": its header runs past the end of the file";
    return false;
  }
  std::string json(header, '\0');
  in.read(&json[0], static_cast<std::streamsize>(header));
  const uint64_t data = 8 + header;
  for (const std::string& name : names) {
    Entry tensor;
    if (!findEntry(path, json, data, size, name, tensor, error)) return false;
    std::vector<float> values(tensor.count);
    if (tensor.dtype == "F32") {
      if (!readBytes(in, tensor, values.data())) {
        error = path + ": cannot read tensor '" + name + "'";
        return false;
      }
    } else {
      Entry scale;
      if (!findEntry(path, json, data, size, name + ".scale", scale, error)) return false;
      const int64_t columns = tensor.shape.empty() ? 0 : tensor.shape.back();
      if (scale.dtype != "F32" || scale.count != columns || columns == 0) {
        error = path + ": '" + name + ".scale' is not one float32 scale per column of '" + name +
                "'";
        return false;
      }
      std::vector<int8_t> q(tensor.count);
      std::vector<float> scales(columns);
      if (!readBytes(in, tensor, q.data()) || !readBytes(in, scale, scales.data())) {
        error = path + ": cannot read tensor '" + name + "'";
        return false;
      }
      for (int64_t i = 0; i < tensor.count; i++) {
        values[i] = static_cast<float>(q[i]) * scales[i % columns];
      }
    }
    std::vector<executorch::aten::SizesType> sizes(tensor.shape.begin(), tensor.shape.end());
    out.tensors.push_back(make_tensor_ptr(std::move(sizes), std::move(values)));
  }
  return true;
}

}  // namespace

extern "C" JNIEXPORT jlong JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeLoad(
    JNIEnv* env, jclass, jstring programPath, jstring dataPath, jstring methodName,
    jint threads) {
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
  auto loaded = std::make_unique<Program>();
  loaded->method = toString(env, methodName);
  // Mmap: the trunk file is mapped, not copied.
  loaded->module = std::make_unique<Module>(program, std::vector<std::string>{data},
                                            Module::LoadMode::Mmap);
  const Error error = loaded->module->load_method(loaded->method);
  if (error != Error::Ok) {
    const std::string method = loaded->method;
    loaded.reset();  // before the pool is let go: its delegates may hold the pool
    releaseThreadPool();
    throwRuntime(env, "ExecuTorch could not load " + method + "() of " + program + " with " +
                          data + ": " + describe(error) +
                          " (a truncated file, or a program exported with another trunk?)");
    return 0;
  }
  return reinterpret_cast<jlong>(loaded.release());
}

extern "C" JNIEXPORT jlong JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeBind(
    JNIEnv* env, jclass, jstring weightsPath, jobjectArray inputNames) {
  std::vector<std::string> names;
  for (jsize i = 0; i < env->GetArrayLength(inputNames); i++) {
    auto name = static_cast<jstring>(env->GetObjectArrayElement(inputNames, i));
    names.push_back(toString(env, name));
    env->DeleteLocalRef(name);
  }
  auto weights = std::make_unique<TaskWeights>();
  std::string error;
  if (!readTaskWeights(toString(env, weightsPath), names, *weights, error)) {
    throwRuntime(env, error);
    return 0;
  }
  return reinterpret_cast<jlong>(weights.release());
}

extern "C" JNIEXPORT jfloatArray JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeForward(
    JNIEnv* env, jclass, jlong handle, jstring methodName, jlong weightsHandle,
    jlongArray inputIds, jlongArray attentionMask, jlongArray tokenTypeIds) {
  auto* program = reinterpret_cast<Program*>(handle);
  // The task's placement's method (a task added later with another adapter has its own);
  // Module::execute loads a method on its first call. Null: the method loaded with the program.
  const std::string method = methodName == nullptr ? program->method : toString(env, methodName);
  const auto* weights = reinterpret_cast<const TaskWeights*>(weightsHandle);
  std::vector<int64_t> ids = toVector(env, inputIds);
  std::vector<int64_t> mask = toVector(env, attentionMask);
  std::vector<int64_t> types = toVector(env, tokenTypeIds);
  if (mask.size() != ids.size() || types.size() != ids.size()) {
    throwRuntime(env, "input_ids, attention_mask and token_type_ids differ in length");
    return nullptr;
  }
  const auto seq = static_cast<executorch::aten::SizesType>(ids.size());
  // Input order: the manifest's io.inputs (input_ids, attention_mask, token_type_ids), then the
  // task's weights in runtimes.executorch.task_inputs order, passed as they lie.
  const TensorPtr text[] = {
      from_blob(ids.data(), {1, seq}, executorch::aten::ScalarType::Long),
      from_blob(mask.data(), {1, seq}, executorch::aten::ScalarType::Long),
      from_blob(types.data(), {1, seq}, executorch::aten::ScalarType::Long),
  };
  std::vector<EValue> inputs;
  inputs.reserve(3 + weights->tensors.size());
  for (const TensorPtr& t : text) inputs.emplace_back(*t);
  for (const TensorPtr& t : weights->tensors) inputs.emplace_back(*t);
  auto result = program->module->execute(method, inputs);
  if (!result.ok()) {
    throwRuntime(env, "ExecuTorch " + method + " failed with " + std::to_string(ids.size()) +
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
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeFreeWeights(JNIEnv*, jclass, jlong handle) {
  delete reinterpret_cast<TaskWeights*>(handle);
}

extern "C" JNIEXPORT void JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeFree(JNIEnv*, jclass, jlong handle) {
  delete reinterpret_cast<Program*>(handle);
  releaseThreadPool();
}
