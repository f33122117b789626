// Pure Java, no Android dependency: tokenizer, manifest parsing, bundle verification, bench JSON.
plugins {
    `java-library`
}

java {
    sourceCompatibility = JavaVersion.VERSION_17
    targetCompatibility = JavaVersion.VERSION_17
}

// The tests use a tiny built-in runner (TestMain), not JUnit, so they also run with bare javac
// (see tests/test_android_core.py). -Ppalkit.vocab=PATH points at the MiniLM vocab.txt.
val coreTest by tasks.registering(JavaExec::class) {
    group = "verification"
    description = "Runs the core tests against the tokenizer golden vectors."
    classpath = sourceSets["test"].runtimeClasspath
    mainClass.set("io.palkit.core.TestMain")
    systemProperty("palkit.golden", file("src/test/resources/tokenizer_golden.json").path)
    systemProperty("palkit.vocab", providers.gradleProperty("palkit.vocab").getOrElse(""))
}
