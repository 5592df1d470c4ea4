#!/usr/bin/env bash
# Writes tests/vectors/cosid-layouts.json: test vectors of cosid's four layouts made by CosId's own
# classes (CosIdVectors.java says how). Needs a JDK (17 or later).
#
# CosId's classes come from one of:
#   - Maven (the default): me.ahoo.cosid:cosid-core $COSID_VERSION and what it needs at run time,
#     through pom.xml beside this script;
#   - COSID_SOURCE=/path/to/a/CosId/checkout: its cosid-core sources, compiled here against
#     Debian's jars (apt-get install liblombok-java libguava-java liberror-prone-java
#     libslf4j-java), for a machine that has no Maven repository to fetch from. The annotations
#     Debian does not package (jspecify's, and Error Prone's @ThreadSafe, newer than Debian's
#     Error Prone) are declared here: they only annotate.
#
#   tests/vectors/generate.sh                              # cosid-core 3.2.1 through Maven
#   COSID_VERSION=3.2.1 tests/vectors/generate.sh
#   COSID_SOURCE=~/src/CosId tests/vectors/generate.sh     # a checkout of the tag v3.2.1
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

if [ -n "${COSID_SOURCE:-}" ]; then
    sources="$COSID_SOURCE/cosid-core/src/main/java"
    [ -d "$sources" ] || { echo "no cosid-core sources in $COSID_SOURCE" >&2; exit 1; }
    version=$(sed -n 's/^version=//p' "$COSID_SOURCE/gradle.properties")
    version="$version (built from source)"
    jars=/usr/share/java
    for jar in lombok guava error_prone_annotations slf4j-api; do
        [ -f "$jars/$jar.jar" ] || { echo "$jars/$jar.jar is missing (see the top of $0)" >&2; exit 1; }
    done
    mkdir -p "$build/classes"
    for annotation in org.jspecify.annotations.{Nullable,NonNull,NullMarked,NullUnmarked} \
        com.google.errorprone.annotations.ThreadSafe; do
        package=${annotation%.*} name=${annotation##*.}
        mkdir -p "$build/annotations/${package//.//}"
        cat > "$build/annotations/${package//.//}/$name.java" <<JAVA
package $package;

@java.lang.annotation.Documented
@java.lang.annotation.Retention(java.lang.annotation.RetentionPolicy.RUNTIME)
public @interface $name {}
JAVA
    done
    classpath="$jars/guava.jar:$jars/error_prone_annotations.jar:$jars/slf4j-api.jar"
    find "$sources" "$build/annotations" -name '*.java' > "$build/sources.txt"
    javac -nowarn -Xlint:none -proc:full -processorpath "$jars/lombok.jar" -cp "$classpath:$jars/lombok.jar" \
        -d "$build/classes" @"$build/sources.txt" 2> >(grep -v '^Note:' >&2)
    classpath="$build/classes:$classpath"
else
    version=${COSID_VERSION:-3.2.1}
    mvn -q -f "$here/pom.xml" -Dcosid.version="$version" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$build/lib"
    classpath="$build/lib/*"
fi

javac -d "$build/vectors" -cp "$classpath" "$here/CosIdVectors.java"
java -cp "$build/vectors:$classpath" CosIdVectors "$version" > "$build/cosid-layouts.json"
mv "$build/cosid-layouts.json" "$here/cosid-layouts.json"
echo "wrote $here/cosid-layouts.json from cosid-core $version"
